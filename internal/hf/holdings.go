package hf

import (
	"strings"
)

// Holdings is what a repository holds for an engine to run: its GGUF file
// sets, its original weights and its vision projectors. The planner, the
// job's choice of a file and the serve page all ask Holds, so that what the
// page lists, what is planned and what a job can pick are the same sets:
// when each worked it out for itself, a set one listed the others missed,
// and two answers to "which file is the weights" disagreed.
type Holdings struct {
	// GGUF are the GGUF sets, sorted by name: whole files and split ones,
	// complete or with shards missing (Missing says which), and a joined
	// file before a split copy of the same name.
	GGUF []FileSet
	// Original is the original (safetensors) weights at the top of the
	// repository, nil when it has none: the "model…" set when there are
	// several (a consolidated copy keeps another name). It may lack
	// shards.
	Original *FileSet
	// Projectors are the vision projectors (mmproj GGUF files), which
	// Group leaves out of the sets.
	Projectors []File
}

// Holds reads what repo holds.
func Holds(repo Repo) Holdings {
	var h Holdings
	var originals []FileSet
	for _, s := range Group(repo.Files) {
		first := strings.ToLower(s.Files[0].Path)
		switch {
		case strings.HasSuffix(first, ".gguf"):
			h.GGUF = append(h.GGUF, s)
		case strings.HasSuffix(first, ".safetensors") && !strings.Contains(s.Name, "/"):
			// At the top only: copies in folders are other variants (an
			// "original/" checkpoint, an export).
			originals = append(originals, s)
		}
	}
	for i, s := range originals {
		if h.Original == nil || (strings.HasPrefix(s.Name, "model") && !strings.HasPrefix(h.Original.Name, "model")) {
			h.Original = &originals[i]
		}
	}
	h.Projectors = Projectors(repo.Files)
	return h
}

// SplitCopy says GGUF[i] is the split copy of a file the repository also
// has joined: the two share a name, and Group sorts the joined one first.
func (h Holdings) SplitCopy(i int) bool {
	return i > 0 && i < len(h.GGUF) && h.GGUF[i-1].Name == h.GGUF[i].Name
}

// FirstWeights is the file to ask the registry about before anything is
// fetched (whether a gated repository's files may be downloaded): the first
// GGUF weights, else the original weights, else the first file.
func FirstWeights(repo Repo) string {
	h := Holds(repo)
	switch {
	case len(h.GGUF) > 0:
		return h.GGUF[0].Files[0].Path
	case h.Original != nil:
		return h.Original.Files[0].Path
	case len(repo.Files) > 0:
		return repo.Files[0].Path
	}
	return ""
}
