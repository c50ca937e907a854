// Package hf reads model repositories: the Hugging Face Hub through its HTTP
// API, and folders of model files on local disk laid out the same way.
//
// Choosing what to serve starts with what a repository holds: which files, how
// large, which commit a branch points at, whether it is gated, and the sha256
// the registry published for each file so that what arrives can be checked.
// This package answers those questions for both kinds of registry, groups
// split GGUF shards into sets, reads quantisation names from file names, and
// refuses any name from a registry that is not safe to use as a path. It is
// also the one way to read a registry's file (Open, for the mirror and the
// header reader), so that the token goes to the registry and never follows
// a redirect anywhere else.
package hf

import "context"

// File is one file of a repository at a commit.
type File struct {
	// Path is relative to the repository's root, with "/" between folders.
	Path string `json:"path"`
	// Size is the file's real size in bytes (for LFS files, the object's).
	Size int64 `json:"size"`
	// SHA256 is the hex sha256 the registry published, empty when it
	// publishes none (small files kept in git rather than LFS).
	SHA256 string `json:"sha256,omitempty"`
}

// Repo is a repository as read at one revision.
type Repo struct {
	// ID is owner/name, as the registry spells it.
	ID string `json:"id"`
	// Revision is what was asked for: a branch, a tag or a commit.
	Revision string `json:"revision"`
	// Commit is the commit the revision resolved to.
	Commit string `json:"commit"`
	// Gated is "", "auto" or "manual": whether an account needs approval
	// before it may download the files.
	Gated   string `json:"gated,omitempty"`
	Private bool   `json:"private,omitempty"`
	Files   []File `json:"files"`
}

// ShortCommit is the first seven characters of the commit, as people write it.
func (r Repo) ShortCommit() string { return Short(r.Commit) }

// Short is a commit as people write it: its first seven characters.
func Short(commit string) string { return commit[:min(7, len(commit))] }

// FileSet is what one model file is made of: a single GGUF file, or the
// shards of a split one, or a set of safetensors weights.
type FileSet struct {
	// Name is the file's name, or for shards the shared prefix.
	Name string `json:"name"`
	// Quant is the quantisation read from the name (Q4_K_M, F16, ...),
	// empty when the name says none.
	Quant string `json:"quant,omitempty"`
	// Files are in shard order.
	Files []File `json:"files"`
	// Bytes is the sum of the files' sizes.
	Bytes int64 `json:"bytes"`
	// Shards is how many shards the name says the set has: 1 for a file
	// that is not split.
	Shards int `json:"shards"`
	// Missing lists the shard numbers (1-based) the repository lacks; a set
	// with any missing cannot be served.
	Missing []int `json:"missing,omitempty"`
}

// Registry is anything that can read a repository: the Hub client and the
// local-folder registry both are.
type Registry interface {
	Repo(ctx context.Context, id, revision string) (Repo, error)
	// Refs lists the repository's branches and tags.
	Refs(ctx context.Context, id string) (Refs, error)
	// DownloadURL is where a file of the repository at a commit is fetched.
	DownloadURL(id, commit, path string) string
}
