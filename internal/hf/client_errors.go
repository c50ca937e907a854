package hf

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"modelserve/internal/operr"
	"modelserve/internal/redact"
	"modelserve/internal/words"
)

// Sentinels for the Hub's refusals, for errors.Is. The error that carries one
// is a sentence for the operator; the sentinel is for code that must tell the
// cases apart (the job refuses a gated repository before fetching anything).
var (
	// ErrGated: the repository is gated and the token (or its absence)
	// does not give access to its files.
	ErrGated = errors.New("gated repository")
	// ErrNotFound: no such repository (or a private one, to the anonymous),
	// or no such file in it.
	ErrNotFound = errors.New("not found")
	// ErrRevisionNotFound: the repository has no such branch, tag or commit.
	ErrRevisionNotFound = errors.New("revision not found")
	// ErrUnauthorized: the registry refused the token itself.
	ErrUnauthorized = errors.New("token refused")
	// ErrDisabled: the repository was disabled by its owner or the registry.
	ErrDisabled = errors.New("repository disabled")
	// ErrUnavailable: the registry kept answering 429 or 5xx through every
	// retry.
	ErrUnavailable = errors.New("registry unavailable")
	// ErrRangeNotSatisfiable: a read was asked to start past the end of the
	// registry's file, which is shorter than the caller thought.
	ErrRangeNotSatisfiable = errors.New("range not satisfiable")
	// ErrOffline: HF_HUB_OFFLINE is set, and nothing is asked of the Hub.
	ErrOffline = errors.New("offline")
)

// kinds classify the sentinels for the operator's error each refusal is.
var kinds = map[error]operr.Kind{
	ErrGated:               operr.Forbidden,
	ErrDisabled:            operr.Forbidden,
	ErrNotFound:            operr.NotFound,
	ErrRevisionNotFound:    operr.NotFound,
	ErrUnauthorized:        operr.Upstream,
	ErrUnavailable:         operr.Unavailable,
	ErrRangeNotSatisfiable: operr.Refused,
	ErrOffline:             operr.Unavailable,
}

// refusal is the operator's sentence for one of the Hub's refusals,
// wrapping the sentinel that tells it from the others.
func refusal(kind error, format string, args ...any) error {
	k, ok := kinds[kind]
	if !ok {
		k = operr.Refused
	}
	return operr.Wrap(k, kind, format, args...)
}

// what a request was about, to name it in the sentence.
type subject struct {
	id       string
	revision string
	path     string // empty when not about one file
}

// refused turns a Hub answer that is not a success (and not worth retrying)
// into the sentence for its case: each of the Hub's refusals has its own. authed says
// whether the request carried the token.
func (c *Client) refused(resp *http.Response, s subject, authed bool) error {
	code := resp.Header.Get("X-Error-Code")
	switch {
	case code == "GatedRepo" && resp.StatusCode == http.StatusForbidden:
		return refusal(ErrGated, "%s is gated and the token's account has not been granted access: "+
			"request access on %s/%s and wait for approval", s.id, c.endpoint, s.id)
	case code == "GatedRepo":
		return refusal(ErrGated, "%s is gated: set HF_TOKEN (or --hf-token) to a token of an account "+
			"that has been granted access to it", s.id)
	case code == "RepoNotFound" && resp.StatusCode == http.StatusUnauthorized:
		return refusal(ErrNotFound, "%s does not exist on %s, or it is private: for a private repository, "+
			"set HF_TOKEN (or --hf-token) to a token of an account that can read it", s.id, c.host())
	case code == "RepoNotFound":
		return refusal(ErrNotFound, "there is no repository %s on %s: check the owner and the name", s.id, c.host())
	case code == "RevisionNotFound":
		return refusal(ErrRevisionNotFound, "%s has no revision %s: name one of its branches, tags or commits",
			s.id, operr.Quote(s.revision))
	case code == "EntryNotFound" && s.path != "":
		return refusal(ErrNotFound, "%s has no file %s at %s", s.id, operr.Quote(s.path), shortRev(s.revision))
	case code == "EntryNotFound":
		return refusal(ErrNotFound, "%s has no such folder at %s", s.id, shortRev(s.revision))
	case resp.StatusCode == http.StatusUnauthorized && authed:
		return refusal(ErrUnauthorized, "%s refused the token while reading %s: check HF_TOKEN (or --hf-token); "+
			"it may be mistyped, expired or revoked", c.host(), s.id)
	case resp.StatusCode == http.StatusUnauthorized:
		return refusal(ErrUnauthorized, "%s needs a token to read %s: set HF_TOKEN (or --hf-token)", c.host(), s.id)
	case resp.StatusCode == http.StatusForbidden:
		return refusal(ErrDisabled, "%s has been disabled by its owner or by %s: its files cannot be fetched",
			s.id, c.host())
	case resp.StatusCode == http.StatusNotFound:
		return refusal(ErrNotFound, "%s answered 404 Not Found for %s%s", c.host(), s.id, s.pathSuffix())
	}
	return fmt.Errorf("%s answered %s for %s%s: %s", c.host(), words.Clip(resp.Status), s.id, s.pathSuffix(), c.hubMessage(resp))
}

func (s subject) pathSuffix() string {
	if s.path == "" {
		return ""
	}
	return " file " + s.path
}

// shortRev writes a commit as people do, and leaves a branch name alone.
func shortRev(rev string) string {
	if isCommit(rev) {
		return Short(rev)
	}
	return rev
}

// hubMessage is what the Hub said about a refusal, for the cases the table
// does not name: clipped (words.Clip) and without anything that looks like
// a credential (redact.Text), the client's own token first. A registry's
// message is whatever it sends: one of 600 KB made log lines of 600 KB,
// and one that echoed the Authorization header put the token in them.
func (c *Client) hubMessage(resp *http.Response) string {
	m := resp.Header.Get("X-Error-Message")
	if m == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		m = strings.TrimSpace(string(b))
	}
	if m == "" {
		return "no reason given"
	}
	return words.Clip(redact.Text(strings.ToValidUTF8(m, "?"), c.token))
}
