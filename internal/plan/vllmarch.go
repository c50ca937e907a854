package plan

import (
	_ "embed"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// vllmArchitectures is the list of model classes vLLM runs, with the first
// release that runs each where it is known, and the last for those vLLM
// has since dropped.
//
//go:embed vllm-architectures.txt
var vllmArchitectures string

// VLLMVersion is a vLLM release, such as 0.11.0; the zero value is one the
// image's tag does not name.
type VLLMVersion [4]int

func (v VLLMVersion) Known() bool { return v != VLLMVersion{} }

func (v VLLMVersion) String() string {
	if !v.Known() {
		return "unknown"
	}
	s := fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
	if v[3] > 0 {
		s += "." + strconv.Itoa(v[3])
	}
	return s
}

func (v VLLMVersion) less(w VLLMVersion) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

// ParseVLLMVersion reads "0.11.0", "v0.10.1.1" or "0.8".
func ParseVLLMVersion(s string) (VLLMVersion, bool) {
	parts := strings.Split(strings.TrimPrefix(s, "v"), ".")
	var v VLLMVersion
	if len(parts) < 2 || len(parts) > 4 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 9999 || strconv.Itoa(n) != p {
			return VLLMVersion{}, false
		}
		v[i] = n
	}
	return v, v.Known()
}

// vllmImageTag is the release an image's tag names: vLLM's own images are
// tagged "v0.11.0"; "latest", "nightly" or a digest name none.
var vllmImageTag = regexp.MustCompile(`:v?(\d+(?:\.\d+){1,3})(?:[-+][A-Za-z0-9._-]*)?$`)

// VLLMImageVersion is the vLLM release a container image runs, as its tag
// says ("vllm/vllm-openai:v0.11.0" is 0.11.0).
func VLLMImageVersion(image string) VLLMVersion {
	m := vllmImageTag.FindStringSubmatch(image)
	if m == nil {
		return VLLMVersion{}
	}
	v, _ := ParseVLLMVersion(m[1])
	return v
}

// VLLMKnown maps the classes vLLM runs to the releases that run each.
type VLLMKnown map[string]VLLMReleases

// VLLMReleases are the releases that run a model class: First and those
// after it (the zero version when any does), up to Last where vLLM has
// dropped the class since (zero while it has not).
type VLLMReleases struct{ First, Last VLLMVersion }

// KnownVLLMArchitectures is a fresh copy of the shipped list.
func KnownVLLMArchitectures() VLLMKnown {
	k, err := parseVLLMArchitectures(vllmArchitectures)
	if err != nil {
		// The list is embedded and its test parses it.
		panic("plan: the embedded vllm-architectures.txt is malformed: " + err.Error())
	}
	return k
}

func parseVLLMArchitectures(text string) (VLLMKnown, error) {
	k := VLLMKnown{}
	n := 0
	for line := range strings.Lines(text) {
		n++
		content, _, _ := strings.Cut(line, "#")
		fields := strings.Fields(content)
		switch len(fields) {
		case 0:
			continue
		case 1, 2, 3:
		default:
			return nil, fmt.Errorf("line %d %q: want a class, its first release and its last", n, strings.TrimSpace(line))
		}
		var r [2]VLLMVersion
		for i, f := range fields[1:] {
			v, ok := ParseVLLMVersion(f)
			if !ok {
				return nil, fmt.Errorf("line %d %q: the release must be a version such as 0.8.4", n, strings.TrimSpace(line))
			}
			r[i] = v
		}
		if r[1].Known() && r[1].less(r[0]) {
			return nil, fmt.Errorf("line %d %q: the last release is before the first", n, strings.TrimSpace(line))
		}
		if _, dup := k[fields[0]]; dup {
			return nil, fmt.Errorf("line %d: %s is listed twice", n, fields[0])
		}
		k[fields[0]] = VLLMReleases{First: r[0], Last: r[1]}
	}
	return k, nil
}

// Supported says whether vLLM release v (unknown: the image's tag names
// none) runs the model class arch, in the sentence an operator acts on
// when it does not.
func (k VLLMKnown) Supported(arch string, v VLLMVersion) error {
	r, ok := k[arch]
	switch {
	case !ok:
		return operr.New(operr.Refused, "%s is not a model class vLLM runs, as far as modelserve knows: serve a GGUF file of it on llama.cpp, "+
			"or pick a model of another architecture", words.Clip(arch))
	case v.Known() && r.First.Known() && v.less(r.First):
		return operr.New(operr.Refused, "%s needs vLLM %s or newer; the nodes run %s: update vLLM (--vllm-image, or the nodes' vllm), or pick a model of another architecture",
			arch, r.First, v)
	case v.Known() && r.Last.Known() && r.Last.less(v):
		return operr.New(operr.Refused, "%s ran on vLLM up to %s, which has dropped it since; the nodes run %s: run vLLM %s (--vllm-image, or the nodes' vllm), "+
			"or pick a model of another architecture", arch, r.Last, v, r.Last)
	}
	return nil
}
