package hf

import (
	"modelserve/internal/operr"
	"regexp"
	"strings"
	"unicode"
)

var repoIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckRepoID refuses anything that is not owner/name. Both halves are
// later used as folder names, so ".." and the like never pass.
func CheckRepoID(id string) error {
	if !repoIDPattern.MatchString(id) || len(id) > 200 {
		return operr.New(operr.Invalid, "%s is not a repository; it looks like owner/name", operr.Quote(id))
	}
	for _, part := range strings.Split(id, "/") {
		if part == "." || part == ".." || strings.Contains(part, "..") {
			return operr.New(operr.Invalid, "%s is not a repository; it looks like owner/name", operr.Quote(id))
		}
	}
	return nil
}

// MaxPathLen is the longest file path modelserve takes, from a registry or
// a request: four times what a real repository's longest comes near.
const MaxPathLen = 1024

// CheckPath refuses a file path from a registry that could escape the folder
// it is joined to, or that no filesystem should be handed: absolute paths,
// "..", backslashes, NULs and control characters, empty segments.
func CheckPath(p string) error {
	bad := func(why string) error {
		return operr.New(operr.Refused, "the registry named a file %s, which %s; it is not fetched", operr.Quote(p), why)
	}
	switch {
	case p == "":
		return bad("is empty")
	case len(p) > MaxPathLen:
		return bad("is longer than any real file path")
	case strings.HasPrefix(p, "/"):
		return bad("starts at the root")
	case strings.ContainsRune(p, '\\'):
		return bad("has a backslash")
	}
	for _, r := range p {
		if r == 0 || unicode.IsControl(r) {
			return bad("has a control character")
		}
	}
	for _, seg := range strings.Split(p, "/") {
		switch seg {
		case "":
			return bad("has an empty folder name")
		case ".", "..":
			return bad("climbs out of its folder")
		}
	}
	return nil
}

// CheckRevision refuses a revision (a branch, tag or commit) no registry
// could have: NULs and control characters, or longer than any ref. It is
// checked before any request, so such a name never reaches a URL or a
// registry's log, and the operator hears what is wrong with it rather than
// the registry's "not found".
func CheckRevision(rev string) error {
	if len(rev) > 255 {
		return operr.New(operr.Invalid, "the revision %s is longer than any branch, tag or commit name; give one the repository has", operr.Quote(rev))
	}
	for _, r := range rev {
		if r == 0 || unicode.IsControl(r) {
			return operr.New(operr.Invalid, "the revision %s has a control character, which no branch, tag or commit name has; give one the repository has", operr.Quote(rev))
		}
	}
	return nil
}
