package hf

import (
	"regexp"
	"strings"
)

// formatSuffix is how quantisers mark a repository of GGUF files; the
// format says nothing about the model, so a catalog name goes without it.
var formatSuffix = regexp.MustCompile(`(?i)[-_.]gguf$`)

// maxModelName keeps a suggested name short enough to type, to show in a
// table and to use as a folder name.
const maxModelName = 64

// ModelName suggests the catalog name for a repository's model:
// "bartowski/Qwen2.5-7B-Instruct-GGUF" becomes "qwen2.5-7b-instruct". The
// owner goes (the same model comes from many quantisers), and so does a
// "-GGUF" suffix; the rest is lower-cased, anything but letters, digits,
// ".", "_" and "-" becomes "-", runs of separators shrink to one, and the
// result is at most 64 characters, starting and ending with a letter or
// digit. For "local/<folder>" the folder gives the name. A name with
// nothing usable left is "model".
func ModelName(repoID string) string {
	name := repoID[strings.LastIndexByte(repoID, '/')+1:]
	if trimmed := formatSuffix.ReplaceAllString(name, ""); trimmed != "" {
		name = trimmed
	}

	var b strings.Builder
	var run []byte // the separators seen since the last letter or digit
	flush := func() {
		if len(run) == 0 {
			return
		}
		// One kind of separator stays as it is ("v0.2"); a mixture
		// ("a_-b", "a - b") becomes a plain dash.
		sep := run[0]
		for _, c := range run {
			if c != sep {
				sep = '-'
			}
		}
		b.WriteByte(sep)
		run = run[:0]
	}
	for _, r := range strings.ToLower(name) {
		switch {
		case 'a' <= r && r <= 'z', '0' <= r && r <= '9':
			if b.Len() > 0 {
				flush()
			}
			run = run[:0]
			b.WriteRune(r)
		case r == '.' || r == '_' || r == '-':
			run = append(run, byte(r))
		default:
			run = append(run, '-')
		}
	}
	// Separators before the first letter and after the last are dropped:
	// the loop only writes a run when a letter or digit follows it.
	out := b.String()
	if len(out) > maxModelName {
		out = strings.TrimRight(out[:maxModelName], "._-")
	}
	if out == "" {
		return "model"
	}
	return out
}
