package hf

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"modelserve/internal/operr"
)

const (
	// MaxQuery bounds a search: no repository id is longer, and a query
	// read from a request is echoed in sentences and sent to the Hub.
	MaxQuery = 200
	// searchLimit is how many models one search lists: enough to find a
	// repository by a word of its name, few enough to read on a phone.
	searchLimit = 20
)

// Found is one repository a search found, with what an operator weighs
// before choosing it.
type Found struct {
	// ID is owner/name, safe to look up (local/FOLDER for a folder).
	ID        string `json:"id"`
	Downloads int64  `json:"downloads"`
	Likes     int64  `json:"likes"`
	// Gated is "", "auto" or "manual", as Repo's.
	Gated   string `json:"gated,omitempty"`
	Private bool   `json:"private,omitempty"`
	// Local is a folder of the models directory rather than a Hub
	// repository; it has no downloads or likes.
	Local bool `json:"local,omitempty"`
}

// checkQuery trims a search query and refuses one too long to be a name.
func checkQuery(query string) (string, error) {
	q := strings.TrimSpace(query)
	if utf8.RuneCountInString(q) > MaxQuery {
		return "", operr.New(operr.Invalid, "a search is at most %d characters, and %s is longer: search for a word of the repository's name",
			MaxQuery, operr.Quote(q))
	}
	return q, nil
}

// Search asks the Hub for the GGUF repositories whose ids contain query,
// at most 20 of them, in the Hub's order. It goes through the same request
// path as Repo: retries, the token to the endpoint only, and the Hub's
// refusals as sentences. An empty query finds nothing without asking.
func (c *Client) Search(ctx context.Context, query string) ([]Found, error) {
	q, err := checkQuery(query)
	if err != nil || q == "" {
		return nil, err
	}
	v := url.Values{"search": {q}, "filter": {"gguf"}, "limit": {strconv.Itoa(searchLimit)}}
	s := subject{id: "the search for " + operr.Quote(q)}
	var list []struct {
		ID        string          `json:"id"`
		ModelID   string          `json:"modelId"`
		Downloads int64           `json:"downloads"`
		Likes     int64           `json:"likes"`
		Gated     json.RawMessage `json:"gated"`
		Private   bool            `json:"private"`
	}
	if _, err := c.getJSON(ctx, c.endpoint+"/api/models?"+v.Encode(), s, &list); err != nil {
		return nil, err
	}
	found := []Found{}
	for _, m := range list {
		id := m.ID
		if id == "" {
			id = m.ModelID // older answers name it only so
		}
		gated, err := parseGated(m.Gated)
		// A name that is not safe as a folder could never be looked up,
		// and an entry whose gating cannot be read would be shown as open:
		// both are left out rather than offered.
		if CheckRepoID(id) != nil || err != nil {
			continue
		}
		found = append(found, Found{ID: id, Downloads: m.Downloads, Likes: m.Likes, Gated: gated, Private: m.Private})
		if len(found) == searchLimit {
			break
		}
	}
	return found, nil
}

// Search finds repositories in both registries: the folders of the models
// directory whose names contain query (any case) first, as local/FOLDER,
// then the Hub's. A query starting "local/" searches the folders only.
// When one registry fails, what the other found is returned with its error,
// so an offline Hub still leaves the local folders to choose from.
func (r Registries) Search(ctx context.Context, query string) ([]Found, error) {
	q, err := checkQuery(query)
	if err != nil || q == "" {
		return nil, err
	}
	localOnly := false
	if rest, ok := strings.CutPrefix(strings.ToLower(q), LocalOwner+"/"); ok {
		q, localOnly = rest, true
	}
	found := []Found{}
	if r.Local != nil {
		ids, err := r.Local.List(ctx)
		if err != nil {
			return found, err
		}
		for _, id := range ids {
			if strings.Contains(strings.ToLower(strings.TrimPrefix(id, LocalOwner+"/")), strings.ToLower(q)) {
				found = append(found, Found{ID: id, Local: true})
			}
			if len(found) == searchLimit {
				break
			}
		}
	}
	if localOnly || r.Hub == nil || q == "" {
		return found, nil
	}
	hub, err := r.Hub.Search(ctx, q)
	return append(found, hub...), err
}
