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
	case len(p) > 1024:
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
