package fleet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Load is what a replica's engine says of its own work, read from its
// /metrics (started with --metrics) and /slots: how busy it is, for the
// console and for routing requests to the least busy replica.
type Load struct {
	// Slots is how many requests the engine serves at once, and SlotsBusy
	// how many it is serving; Context is the context of one slot.
	Slots     int `json:"slots"`
	SlotsBusy int `json:"slots_busy"`
	Context   int `json:"slot_context"`
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
func (f *Fleet) readLoad(ctx context.Context, endpoint, key string) (Load, error) {
	var l Load
	body, err := f.engineGet(ctx, endpoint+"/slots", key)
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
	l.Slots = len(slots)
	for _, s := range slots {
		if s.IsProcessing {
			l.SlotsBusy++
		}
		l.Context = max(l.Context, s.NCtx)
	}
	l.At = time.Now()
	if body, err = f.engineGet(ctx, endpoint+"/metrics", key); err != nil {
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
func (f *Fleet) engineGet(ctx context.Context, url, key string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := f.health.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxLoadBody))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	return body, nil
}

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
