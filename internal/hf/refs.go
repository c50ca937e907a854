package hf

import (
	"context"
	"strings"

	"modelserve/internal/operr"
)

// What a revision is, as the registry's refs tell: only a branch moves on
// by itself. A tag, a commit or any other ref (a pull request's) names
// one set of files for good.
const (
	RefBranch = "branch"
	RefTag    = "tag"
	RefCommit = "commit"
	RefOther  = "other"
)

const (
	// maxRefs bounds the branches and tags one listing may hold: far
	// beyond any model repository, and a registry that sends more is not
	// answering the question asked.
	maxRefs = 10000
	// maxRefsBytes bounds the listing's JSON: maxRefs entries of a long
	// name and a commit each.
	maxRefsBytes = 8 << 20
)

// Ref is a branch or a tag and the commit it points at.
type Ref struct {
	Name   string `json:"name"`
	Commit string `json:"commit"`
}

// Refs are a repository's branches and tags.
type Refs struct {
	Branches []Ref `json:"branches"`
	Tags     []Ref `json:"tags"`
}

// Branch is the branch named name, and whether there is one.
func (r Refs) Branch(name string) (Ref, bool) {
	for _, b := range r.Branches {
		if b.Name == name {
			return b, true
		}
	}
	return Ref{}, false
}

// KindOf says what rev is: RefCommit for a full commit id (which needs no
// listing to tell), RefBranch or RefTag as listed, and RefOther for
// anything else the registry resolves (a pull request's ref, a short
// commit).
func (r Refs) KindOf(rev string) string {
	if _, ok := r.Branch(rev); ok {
		return RefBranch
	}
	for _, t := range r.Tags {
		if t.Name == rev {
			return RefTag
		}
	}
	if isCommit(rev) {
		return RefCommit
	}
	return RefOther
}

// IsCommit reports whether rev is a full commit id, which names one set of
// files however the repository's branches move.
func IsCommit(rev string) bool { return isCommit(rev) }

type gitRef struct {
	Name         string `json:"name"`
	TargetCommit string `json:"targetCommit"`
}

// Refs lists a repository's branches and tags with the commit each points
// at (GET /api/models/{id}/refs). It is how a branch is told from a tag,
// which the model info at a revision does not say, and where a branch's
// head is read in one small request. A name that no revision could have,
// or a commit that is not one, refuses the whole listing.
func (c *Client) Refs(ctx context.Context, id string) (Refs, error) {
	if err := CheckRepoID(id); err != nil {
		return Refs{}, err
	}
	var list struct {
		Branches []gitRef `json:"branches"`
		Tags     []gitRef `json:"tags"`
	}
	s := subject{id: id}
	if _, err := c.getJSONAtMost(ctx, c.endpoint+"/api/models/"+id+"/refs", s, &list, maxRefsBytes); err != nil {
		return Refs{}, err
	}
	if n := len(list.Branches) + len(list.Tags); n > maxRefs {
		return Refs{}, operr.New(operr.Refused, "%s listed %d branches and tags for %s, more than the %d modelserve reads; the listing is not trusted",
			c.host(), n, id, maxRefs)
	}
	var out Refs
	for _, part := range []struct {
		from []gitRef
		to   *[]Ref
	}{{list.Branches, &out.Branches}, {list.Tags, &out.Tags}} {
		for _, g := range part.from {
			r, err := c.refOf(id, g)
			if err != nil {
				return Refs{}, err
			}
			*part.to = append(*part.to, r)
		}
	}
	return out, nil
}

// refOf checks one entry of a refs listing.
func (c *Client) refOf(id string, g gitRef) (Ref, error) {
	if strings.TrimSpace(g.Name) == "" || CheckRevision(g.Name) != nil {
		return Ref{}, operr.New(operr.Refused, "%s listed a ref of %s named %s, which no branch or tag can be; the listing is not trusted",
			c.host(), id, operr.Quote(g.Name))
	}
	if !isCommit(g.TargetCommit) {
		return Ref{}, operr.New(operr.Refused, "%s listed %s of %s at %s, which is not a commit id; the listing is not trusted",
			c.host(), operr.Quote(g.Name), id, operr.Quote(g.TargetCommit))
	}
	return Ref{Name: g.Name, Commit: g.TargetCommit}, nil
}

// Refs of a local folder: it has one branch, main, at the digest of what
// it holds now.
func (l *Local) Refs(ctx context.Context, id string) (Refs, error) {
	repo, err := l.Repo(ctx, id, "main")
	if err != nil {
		return Refs{}, err
	}
	return Refs{Branches: []Ref{{Name: "main", Commit: repo.Commit}}}, nil
}

// Refs lists the branches and tags of a repository of whichever registry
// holds it.
func (r Registries) Refs(ctx context.Context, id string) (Refs, error) {
	reg, err := r.pick(id)
	if err != nil {
		return Refs{}, err
	}
	return reg.Refs(ctx, id)
}
