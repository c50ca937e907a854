package gguf

import (
	_ "embed"
	"fmt"
	"maps"
	"modelserve/internal/operr"
	"modelserve/internal/words"
	"slices"
	"strconv"
	"strings"
)

// architectures is the list of architectures llama.cpp's llama-server loads,
// each with the first build that loads it where that is known: llama-server
// has no flag that lists them, and a node's build may be older than the list.
//
//go:embed architectures.txt
var architectures string

// maxBuild bounds a minimum build in the list: llama.cpp's release numbers are
// far below it, so a larger one is a typing mistake.
const maxBuild = 1_000_000

// Known maps the general.architecture names an engine runs to the first
// llama.cpp build (release number, as in tag b5092) that runs each, or 0 when
// any build that knows the name runs it.
type Known map[string]int

// KnownArchitectures is a fresh copy of the shipped list. A caller whose nodes
// run a build newer than the list adds the names it learned with Add.
func KnownArchitectures() Known {
	k, err := parseArchitectures(architectures)
	if err != nil {
		// The list is embedded and its test parses it: this is a build
		// that skipped the tests, not something an operator can fix.
		panic("gguf: the embedded architectures.txt is malformed: " + err.Error())
	}
	return k
}

// parseArchitectures reads the list: a name per line, optionally followed by
// its minimum build; '#' starts a comment. A line it cannot read is an error,
// not dropped, so a typo cannot quietly lift a minimum.
func parseArchitectures(text string) (Known, error) {
	k := Known{}
	n := 0
	for line := range strings.Lines(text) {
		n++
		content, _, _ := strings.Cut(line, "#")
		fields := strings.Fields(content)
		if len(fields) == 0 {
			continue
		}
		if len(fields) > 2 {
			return nil, fmt.Errorf("line %d %q: want a name and at most one build number", n, strings.TrimSpace(line))
		}
		name, first := fields[0], 0
		if len(fields) == 2 {
			b, err := strconv.Atoi(fields[1])
			if err != nil || b <= 0 || b >= maxBuild {
				return nil, fmt.Errorf("line %d %q: the build must be a release number from 1 to %d, without the b", n, strings.TrimSpace(line), maxBuild-1)
			}
			first = b
		}
		if _, dup := k[name]; dup {
			return nil, fmt.Errorf("line %d: %s is listed twice", n, name)
		}
		k[name] = first
	}
	return k, nil
}

// Add adds architecture names, as a flag gives them (surrounding spaces and
// empty names are ignored). The operator declares that the nodes' build runs
// them, so an added name has no minimum, even one the list already had.
func (k Known) Add(names ...string) {
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			k[n] = 0
		}
	}
}

// Names are the set's names, sorted.
func (k Known) Names() []string {
	return slices.Sorted(maps.Keys(k))
}

// MinBuild is the first llama.cpp build that runs arch: ok is false when arch
// is not known at all, and first is 0 when any build that knows it runs it.
func (k Known) MinBuild(arch string) (first int, ok bool) {
	first, ok = k[arch]
	return first, ok
}

// Supported says whether llama.cpp build (its release number, 0 when not
// known) can run a model of architecture arch, and if not, why, in a sentence
// for the operator. A projector (clip) is never a model, whatever the list
// says: llama.cpp lists clip only to quantise projectors. With the build not
// known, only the name is checked: the engine's own load is the final word.
func (k Known) Supported(arch string, build int) error {
	engine := "llama.cpp"
	if build > 0 {
		engine = fmt.Sprintf("llama.cpp b%d", build)
	}
	first, known := k[arch]
	switch {
	case arch == "":
		return operr.New(operr.Refused, "%s on the nodes cannot run this: its header names no architecture (general.architecture is missing)", engine)
	case arch == "clip":
		return operr.New(operr.Refused, "%s on the nodes cannot run this: it is a vision projector (architecture clip), loaded beside a model's weights, not a model", engine)
	case !known:
		return operr.New(operr.Refused, "%s on the nodes cannot run this: its architecture %s is not one it knows", engine, words.Clip(arch))
	case build > 0 && first > build:
		return operr.New(operr.Refused, "%s needs llama.cpp b%d or newer; the nodes run b%d: update llama-server on the nodes, or pick a model of another architecture", arch, first, build)
	}
	return nil
}

// Supported is KnownArchitectures().Supported: the shipped list alone.
func Supported(arch string, build int) error {
	return KnownArchitectures().Supported(arch, build)
}
