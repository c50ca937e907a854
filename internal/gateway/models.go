package gateway

import (
	"encoding/json"
	"net/http"

	"modelserve/catalog"
	"modelserve/internal/auth"
	"modelserve/internal/fleet"
)

// modelEntry is one model in OpenAI's list shape, with what modelserve
// knows beyond it under one field of its own, so a client that reads only
// OpenAI's fields is not confused by ours.
type modelEntry struct {
	ID      string     `json:"id"`
	Object  string     `json:"object"`
	Created int64      `json:"created"`
	OwnedBy string     `json:"owned_by"`
	Extra   modelExtra `json:"modelserve"`
}

type modelExtra struct {
	// AliasOf is the catalog name an alias reaches; empty for the name.
	AliasOf string   `json:"alias_of,omitempty"`
	Aliases []string `json:"aliases,omitempty"`
	// Role is the catalog's role: empty for a model that serves clients,
	// "guard" for a judge (callable all the same).
	Role       string `json:"role,omitempty"`
	Embeddings bool   `json:"embeddings,omitempty"`
	Context    int    `json:"context_length"`
	// MaxOutput is the longest answer a request may ask for (suits.go).
	MaxOutput int `json:"max_output,omitempty"`
	// Ready is whether a replica answers now; Replicas how many run
	// (ready, answering). A model loaded on demand (OnDemand) is not ready
	// until asked for. State says the same in a word a client can show:
	// Loaded, Loading or Unloaded.
	Ready    bool   `json:"ready"`
	Replicas int    `json:"replicas"`
	OnDemand bool   `json:"on_demand,omitempty"`
	State    string `json:"state"`
}

// A model's state, as /v1/models says it.
const (
	// Loaded: a replica answers now.
	Loaded = "loaded"
	// Loading: none answers yet, and one is on its way: the fleet wants
	// one (kept by scaling.min, or asked for on demand) and has not parked
	// it nor found no room for it, or a request waits for its cold start.
	Loading = "loading"
	// Unloaded: none answers and none is on its way; a model loaded on
	// demand starts with its first request.
	Unloaded = "unloaded"
)

// State is model's state (a catalog name): Loaded, Loading or Unloaded.
// The console's playground says "loading" by it while a reply waits.
func (g *Gateway) State(model string) string {
	return g.state(model, len(g.opts.Fleet.Serving(model)), healthByModel(g.opts.Fleet.ModelHealth()))
}

// healthByModel is the fleet's health of every model, by model: a list of
// hundreds is looked up once a model, not searched.
func healthByModel(health []fleet.ModelHealth) map[string]fleet.ModelHealth {
	out := make(map[string]fleet.ModelHealth, len(health))
	for _, h := range health {
		out[h.Model] = h
	}
	return out
}

// state is model's state with ready replicas, by the fleet's health of
// every model.
func (g *Gateway) state(model string, ready int, health map[string]fleet.ModelHealth) string {
	if ready > 0 {
		return Loaded
	}
	if g.coldWait(model) {
		return Loading
	}
	if h, ok := health[model]; ok && h.Want > 0 && !h.Parked && !h.Unplaceable {
		return Loading
	}
	return Unloaded
}

// coldWait is whether a request waits for model's first replica to start.
func (g *Gateway) coldWait(model string) bool {
	g.mu.Lock()
	p := g.pools[model]
	g.mu.Unlock()
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.coldSince.IsZero() && len(p.queue) > 0
}

// ListModels answers GET /v1/models: the catalog's models and their
// aliases, each alias an entry of its own since clients ask by it, but for
// canaries; a token limited to models sees those alone.
func (g *Gateway) ListModels(w http.ResponseWriter, r *http.Request) {
	who, aerr := g.authenticate(r)
	if aerr != nil {
		aerr.write(w)
		return
	}
	models, err := g.names.list(r.Context())
	if err != nil {
		g.log.Error("listing the catalog for /v1/models", "err", err)
		internal().write(w)
		return
	}
	data := []modelEntry{}
	health := healthByModel(g.opts.Fleet.ModelHealth())
	for _, m := range models {
		// A canary is its model's new version, reached through the model
		// by its share: no client names it.
		if m.Canary != nil {
			continue
		}
		data = append(data, g.entries(m, who, health)...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// ShowModel answers GET /v1/models/{model}.
func (g *Gateway) ShowModel(w http.ResponseWriter, r *http.Request) {
	who, aerr := g.authenticate(r)
	if aerr != nil {
		aerr.write(w)
		return
	}
	asked := r.PathValue("model")
	m, ok, err := g.names.lookup(r.Context(), asked)
	if err != nil {
		g.log.Error("reading the catalog for /v1/models", "err", err)
		internal().write(w)
		return
	}
	if !ok || m.Canary != nil {
		modelNotFound(asked).write(w)
		return
	}
	if aerr := mayUse(who, asked, m.Name); aerr != nil {
		aerr.write(w)
		return
	}
	for _, e := range g.entries(m, auth.Token{}, healthByModel(g.opts.Fleet.ModelHealth())) {
		if e.ID == asked {
			writeJSON(w, http.StatusOK, e)
			return
		}
	}
}

// entries are m's name and aliases as the token may see them, health the
// fleet's of every model.
func (g *Gateway) entries(m catalog.Model, who auth.Token, health map[string]fleet.ModelHealth) []modelEntry {
	ready := len(g.opts.Fleet.Serving(m.Name))
	extra := modelExtra{
		Aliases: m.Aliases, Role: m.Role, Embeddings: m.Capabilities.Embeddings, Context: m.ContextLength, MaxOutput: m.MaxOutput,
		Ready: ready > 0, Replicas: ready, OnDemand: m.Scaling.Min == 0, State: g.state(m.Name, ready, health),
	}
	var out []modelEntry
	for i, id := range append([]string{m.Name}, m.Aliases...) {
		if !who.MayUse(m.Name, id) {
			continue
		}
		e := modelEntry{ID: id, Object: "model", Created: m.AddedAt.Unix(), OwnedBy: "modelserve", Extra: extra}
		if i > 0 {
			e.Extra.AliasOf, e.Extra.Aliases = m.Name, nil
		}
		out = append(out, e)
	}
	return out
}

// NotFound answers a /v1/ route the gateway does not have, in OpenAI's
// error shape.
func (g *Gateway) NotFound(w http.ResponseWriter, r *http.Request) {
	(&apiError{status: http.StatusNotFound, Type: "invalid_request_error", Code: "unknown_url",
		Message: "no gateway route " + r.Method + " " + r.URL.Path + ": the gateway answers GET /v1/models and " +
			"POST /v1/... with a JSON body naming a model"}).write(w)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
