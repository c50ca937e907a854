package handlers

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gateway"
	"modelserve/views"
)

// The playground is where an operator tries a served model by hand: a chat
// whose reply streams in as the model writes it, or for an embedding model
// a text to embed. It calls the model through the gateway in-process, by
// the path a client's request takes (routing, queueing, starting on
// demand), so what it shows is what a client would get.

// Defaults of the playground's parameters: a reply of a few paragraphs,
// and some variety.
const (
	defaultMaxTokens   = 256
	defaultTemperature = "0.7"
)

// playgroundPage shows a served model's playground.
func (s *Server) playgroundPage(w http.ResponseWriter, r *http.Request, v visit) {
	m, ok := s.playgroundModel(w, r, v)
	if !ok {
		return
	}
	s.render(w, r, http.StatusOK, views.PlaygroundPageView(s.playgroundView(r, v, m)))
}

// playgroundModel loads the model the path names, and says so when the
// playground cannot call it.
func (s *Server) playgroundModel(w http.ResponseWriter, r *http.Request, v visit) (catalog.Model, bool) {
	m, err := s.deps.Catalog.Get(r.Context(), r.PathValue("name"))
	if err != nil {
		s.pageError(w, r, v, err)
		return catalog.Model{}, false
	}
	if s.deps.Gateway == nil {
		s.message(w, r, v, http.StatusServiceUnavailable, "No gateway",
			"this modelserve runs no gateway, which the playground calls models through: start it with modelserve serve")
		return catalog.Model{}, false
	}
	return m, true
}

// playgroundView is the page for m with an empty conversation and the
// default parameters.
func (s *Server) playgroundView(r *http.Request, v visit, m catalog.Model) views.PlaygroundPage {
	p := views.PlaygroundPage{
		Layout: s.layout(v, "catalog", m.Name+" · playground"),
		Model:  m.Name, Embeddings: m.Capabilities.Embeddings, Description: m.Description,
		Form: views.PlaygroundForm{
			Action: playgroundURL(m.Name), CSRF: v.csrf, Embeddings: m.Capabilities.Embeddings,
			MaxTokens: fmt.Sprint(min(defaultMaxTokens, maxTokensLimit(m))), Temperature: defaultTemperature,
			MaxTokensLimit: fmt.Sprint(maxTokensLimit(m)),
		},
		CallIt: callItView(s.publicBase(r), m, s.tokenCreate),
	}
	p.State = s.playgroundState(m)
	return p
}

// playgroundState is how m fares now, as the playground's heading says it.
func (s *Server) playgroundState(m catalog.Model) views.PlaygroundState {
	st := views.PlaygroundState{Model: m.Name, Embeddings: m.Capabilities.Embeddings}
	if s.deps.Fleet != nil {
		health, looked := s.healthOf(m.Name)
		st.Running = runningText(health, looked)
	}
	st.Unloaded = s.deps.Gateway != nil && s.deps.Gateway.State(m.Name) == gateway.Unloaded
	return st
}

// healthOf is how the fleet fares with model; false when it has not
// looked at it yet, or there is no fleet.
func (s *Server) healthOf(model string) (fleet.ModelHealth, bool) {
	if s.deps.Fleet == nil {
		return fleet.ModelHealth{}, false
	}
	for _, h := range s.deps.Fleet.ModelHealth() {
		if h.Model == model {
			return h, true
		}
	}
	return fleet.ModelHealth{}, false
}

// maxTokensLimit is the most a reply may be: the catalog's longest answer,
// which the gateway holds every request to, else the model's context,
// which the prompt shares.
func maxTokensLimit(m catalog.Model) int {
	if m.MaxOutput > 0 {
		return m.MaxOutput
	}
	if m.ContextLength > 0 {
		return m.ContextLength
	}
	return 1 << 20
}

func playgroundURL(model string) string {
	return "/catalog/" + url.PathEscape(model) + "/playground"
}

// latencyText is a short time as a person reads it: "38 ms", "1.2 s".
func latencyText(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", max(d.Milliseconds(), 1))
	}
	return durationText(d)
}
