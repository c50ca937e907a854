package hf

import (
	"context"
	"modelserve/internal/operr"
	"strings"
)

// LocalOwner is the owner part of every local-folder repository's id.
const LocalOwner = "local"

// Registries sends each repository to the registry that holds it: ids under
// local/ to the local folder, every other to the Hub. Either may be nil,
// when it is not configured.
type Registries struct {
	Hub   *Client
	Local *Local
}

func (r Registries) pick(id string) (Registry, error) {
	if strings.HasPrefix(id, LocalOwner+"/") {
		if r.Local == nil {
			return nil, operr.New(operr.NotFound, "%s is a local repository, and no local folder is configured: start modelserve with --models-dir", id)
		}
		return r.Local, nil
	}
	if r.Hub == nil {
		return nil, operr.New(operr.Unavailable, "%s is on the Hub, and no Hub is configured", id)
	}
	return r.Hub, nil
}

// Repo reads a repository from whichever registry holds it.
func (r Registries) Repo(ctx context.Context, id, revision string) (Repo, error) {
	reg, err := r.pick(id)
	if err != nil {
		return Repo{}, err
	}
	return reg.Repo(ctx, id, revision)
}

// DownloadURL is where a file is fetched: a Hub resolve URL, or a file://
// URL for a local folder.
func (r Registries) DownloadURL(id, commit, path string) string {
	reg, err := r.pick(id)
	if err != nil {
		return ""
	}
	return reg.DownloadURL(id, commit, path)
}

// CanDownload says whether the token may fetch the repository's files; a
// local folder always may.
func (r Registries) CanDownload(ctx context.Context, repo Repo, path string) error {
	if strings.HasPrefix(repo.ID, LocalOwner+"/") {
		return nil
	}
	if r.Hub == nil {
		return operr.New(operr.Unavailable, "%s is on the Hub, and no Hub is configured", repo.ID)
	}
	return r.Hub.CanDownload(ctx, repo, path)
}
