package hubtest

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// SearchRoute is the id that FailNext and ClearFaults take for the search
// route (GET /api/models), which belongs to no repository: a test fails the
// next searches with FailNext(SearchRoute, "", status, k).
const SearchRoute = "api/models"

// foundModel is one entry of a search answer, with the fields the Hub sends
// that clients read.
type foundModel struct {
	MongoID   string   `json:"_id"`
	ID        string   `json:"id"`
	ModelID   string   `json:"modelId"`
	Downloads int64    `json:"downloads"`
	Likes     int64    `json:"likes"`
	Gated     any      `json:"gated"`
	Private   bool     `json:"private"`
	Tags      []string `json:"tags"`
}

// search answers GET /api/models?search=&filter=gguf&limit= as the Hub
// does: the repositories whose ids contain the search (any case), those
// with a .gguf file on the default branch when filter=gguf, private ones
// only to a token granted them, sorted by id so answers repeat.
func (s *Server) search(w http.ResponseWriter, r *http.Request) {
	if s.writeInjected(w, r, fileKey{SearchRoute, ""}) {
		return
	}
	q := r.URL.Query()
	limit := 1000 // the Hub's own cap
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 {
			writeError(w, r, http.StatusBadRequest, "", "Invalid limit")
			return
		}
		limit = min(n, limit)
	}
	want := strings.ToLower(q.Get("search"))
	gguf := q.Get("filter") == "gguf"

	s.mu.Lock()
	defer s.mu.Unlock()
	var granted map[string]bool
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if granted = s.tokens[tok]; !ok || granted == nil {
			writeError(w, r, http.StatusUnauthorized, "", msgBadToken)
			return
		}
	}
	found := []foundModel{}
	for id, rp := range s.repos {
		if (rp.private && !granted[id]) || !strings.Contains(strings.ToLower(id), want) {
			continue
		}
		if gguf && !hasGGUF(rp.commits[rp.refs[rp.branches[0]]]) {
			continue
		}
		var gated any = false
		if rp.gated != "" {
			gated = rp.gated
		}
		found = append(found, foundModel{MongoID: id, ID: id, ModelID: id, Downloads: rp.downloads, Likes: rp.likes,
			Gated: gated, Private: rp.private, Tags: []string{"gguf"}})
	}
	sort.Slice(found, func(i, j int) bool { return found[i].ID < found[j].ID })
	writeJSON(w, r, http.StatusOK, found[:min(len(found), limit)])
}

func hasGGUF(c *commit) bool {
	if c == nil {
		return false
	}
	for p, e := range c.entries {
		if e.Type == "file" && strings.HasSuffix(strings.ToLower(p), ".gguf") {
			return true
		}
	}
	return false
}
