package gguf

import (
	_ "embed"
	"fmt"
	"slices"
	"strings"
)

// architectures is the list of architectures the supported llama.cpp build
// loads: llama-server has no flag that lists them, so it is shipped.
//
//go:embed architectures.txt
var architectures string

// Known is a set of general.architecture names an engine build loads.
type Known map[string]bool

// KnownArchitectures is a fresh copy of the shipped list, for the llama.cpp
// build modelserve supports. A caller whose nodes run a newer build adds the
// names it learned with Add.
func KnownArchitectures() Known {
	k := Known{}
	for line := range strings.Lines(architectures) {
		if name, _, _ := strings.Cut(line, "#"); strings.TrimSpace(name) != "" {
			k[strings.TrimSpace(name)] = true
		}
	}
	return k
}

// Add adds architecture names, as a flag gives them (surrounding spaces and
// empty names are ignored).
func (k Known) Add(names ...string) {
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			k[n] = true
		}
	}
}

// Names are the set's names, sorted.
func (k Known) Names() []string {
	names := make([]string, 0, len(k))
	for n := range k {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Supported says whether llama.cpp build (as `llama-server --version` names
// it) can run a model of architecture arch, and if not, why, in a sentence
// for the operator. A projector (clip) is never a model, whatever the list
// says: llama.cpp lists clip only to quantise projectors.
func (k Known) Supported(arch, build string) error {
	engine := "llama.cpp"
	if build = strings.TrimSpace(build); build != "" {
		engine += " " + build
	}
	switch {
	case arch == "":
		return fmt.Errorf("%s on the nodes cannot run this: its header names no architecture (general.architecture is missing)", engine)
	case arch == "clip":
		return fmt.Errorf("%s on the nodes cannot run this: it is a vision projector (architecture clip), loaded beside a model's weights, not a model", engine)
	case !k[arch]:
		return fmt.Errorf("%s on the nodes cannot run this: its architecture %s is not one it knows", engine, arch)
	}
	return nil
}

// Supported is KnownArchitectures().Supported: the shipped list alone.
func Supported(arch, build string) error {
	return KnownArchitectures().Supported(arch, build)
}
