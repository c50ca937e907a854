package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"modelserve/catalog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Load is what a replica's engine says of its own work, read from its
// /metrics (started with --metrics) and /slots: how busy it is, for the
// console and for routing requests to the least busy replica.
type Load struct {
	// Size is the requests the engine serves at once and the pool they
	// share, as the engine says them (its JSON is "slots" and each slot's
	// "slot_context": loadWire); SlotsBusy is how many it is serving.
	Size      catalog.Size `json:"-"`
	SlotsBusy int          `json:"slots_busy"`
	// Processing and Deferred are llama.cpp's requests_processing and
	// requests_deferred: requests being served, and waiting for a slot.
	Processing int `json:"requests_processing"`
	Deferred   int `json:"requests_deferred"`
	// KVCacheUsage is kv_cache_usage_ratio (0..1), which only some
	// builds report; nil where the engine does not.
	KVCacheUsage *float64 `json:"kv_cache_usage_ratio,omitempty"`
	// Totals since the engine started: prompt tokens evaluated, prompt
	// tokens taken from the prompt cache instead, and tokens generated.
	PromptTokens    int64     `json:"prompt_tokens_total"`
	CachedTokens    int64     `json:"prompt_tokens_cached_total"`
	PredictedTokens int64     `json:"tokens_predicted_total"`
	At              time.Time `json:"at"`
}

// maxLoadBody bounds what is read of an engine's /metrics or /slots: a
// few kilobytes normally, and never a reason to hold megabytes.
const maxLoadBody = 1 << 20

// readLoad asks the engine at endpoint, with its key, for its /slots and
// /metrics. /slots alone suffices: an engine without --metrics still says
// how many of its slots are busy.
func (b *processes) readLoad(ctx context.Context, endpoint, key string) (Load, error) {
	var l Load
	body, err := b.engineGet(ctx, endpoint+"/slots", key)
	if err != nil {
		return l, err
	}
	var slots []struct {
		NCtx         int  `json:"n_ctx"`
		IsProcessing bool `json:"is_processing"`
	}
	if err := json.Unmarshal(body, &slots); err != nil {
		return l, fmt.Errorf("the engine's /slots is not a list of slots: %w", err)
	}
	slotCtx := 0
	for _, s := range slots {
		if s.IsProcessing {
			l.SlotsBusy++
		}
		slotCtx = max(slotCtx, s.NCtx)
	}
	l.Size = catalog.SizeForSlots(len(slots), slotCtx)
	l.At = time.Now()
	if body, err = b.engineGet(ctx, endpoint+"/metrics", key); err != nil {
		return l, nil
	}
	m := parseMetrics(string(body))
	l.Processing = int(m["llamacpp:requests_processing"])
	l.Deferred = int(m["llamacpp:requests_deferred"])
	l.PromptTokens = int64(m["llamacpp:prompt_tokens_total"])
	l.CachedTokens = int64(m["llamacpp:prompt_tokens_cached_total"])
	l.PredictedTokens = int64(m["llamacpp:tokens_predicted_total"])
	if v, ok := m["llamacpp:kv_cache_usage_ratio"]; ok {
		l.KVCacheUsage = &v
	}
	return l, nil
}

// engineGet is the body of a 200 answer to GET url with the engine's key.
func (b *processes) engineGet(ctx context.Context, url, key string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := b.health.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLoadBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &engineStatus{url: url, status: resp.Status, code: resp.StatusCode}
	}
	return body, nil
}

// engineStatus is an engine's answer other than 200: a 503 from /health
// is an engine still loading its weights.
type engineStatus struct {
	url, status string
	code        int
}

func (e *engineStatus) Error() string { return fmt.Sprintf("GET %s answered %s", e.url, e.status) }

// parseMetrics reads the unlabelled samples of Prometheus text: the
// engine's figures are all unlabelled, and nothing else is needed of it.
func parseMetrics(text string) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok || strings.ContainsRune(name, '{') {
			continue
		}
		value, _, _ = strings.Cut(strings.TrimSpace(value), " ") // a timestamp may follow
		if v, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// loadWire is a Load as its JSON has always said it: the slots, and the
// context of one slot.
type loadWire struct {
	Slots       int `json:"slots"`
	SlotsBusy   int `json:"slots_busy"`
	SlotContext int `json:"slot_context"`
	loadFields
}

// loadFields is Load without its methods, so that loadWire encodes its
// other fields the ordinary way.
type loadFields Load

// MarshalJSON writes the load with its size as slots and slot_context.
func (l Load) MarshalJSON() ([]byte, error) {
	return json.Marshal(loadWire{Slots: l.Size.Slots, SlotsBusy: l.SlotsBusy, SlotContext: l.Size.Context(), loadFields: loadFields(l)})
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (l *Load) UnmarshalJSON(b []byte) error {
	var w loadWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*l = Load(w.loadFields)
	l.Size, l.SlotsBusy = catalog.SizeForSlots(w.Slots, w.SlotContext), w.SlotsBusy
	return nil
}
