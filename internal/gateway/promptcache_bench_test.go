package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/gguf"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/plan"
)

// BenchmarkPromptCacheBound: the engine as modelserve starts it, its
// prompt cache sized by the plan (one slot's KV cache, counted in what
// the replica is placed by), beside the same engine left to llama.cpp's
// default cache (up to 8 GiB, counted nowhere), each asked the same
// 2,400 chat requests, 8 at a time, each a different prompt as
// conversations are. Reported for each: how much the engine's resident
// memory grew over them (the default's grows with every prompt, past the
// placement; the planned one's stays near its cache, cache_MiB).
func BenchmarkPromptCacheBound(b *testing.B) {
	m, _, sz := sizedChatModel(b, "cache", plan.Ask{CtxPool: 16384, ContextLength: 4096}, nil)
	if sz.PromptCacheBytes == 0 {
		b.Fatalf("the plan gave the test model no prompt cache: %+v", sz)
	}
	p := m.Profiles[0]
	p.Size, p.PromptCacheBytes = sz.Size, sz.PromptCacheBytes
	sized := fleet.EngineArgs(m, p, m.Source, "", 1)
	i := slices.Index(sized, "--cache-ram")
	if i < 0 || sized[i+1] != strconv.FormatInt(sz.PromptCacheBytes>>20, 10) {
		b.Fatalf("the engine's arguments %q do not give it the planned cache of %d bytes", sized, sz.PromptCacheBytes)
	}
	unbounded := slices.Delete(slices.Clone(sized), i, i+2)

	const requests, clients = 2400, 8
	for _, side := range []struct {
		name string
		args []string
	}{{"planned", sized}, {"engine_default", unbounded}} {
		b.Run(side.name, func(b *testing.B) {
			for b.Loop() {
				url, cmd := llamatest.Start(b, append(slices.Clone(side.args), "--api-key", "k")...)
				llamatest.WaitReady(b, url, time.Minute)
				to := func(i int) (string, string, []byte) {
					body, _ := json.Marshal(map[string]any{"model": "cache", "max_tokens": 4,
						"messages": []map[string]string{{"role": "user", "content": fmt.Sprintf("Conversation %d: say hello.", i)}}})
					return url + "/v1/chat/completions", "k", body
				}
				runLoad(b, clients, clients, to)
				before := residentBytes(b, cmd.Process.Pid)
				runLoad(b, requests, clients, to)
				grew := residentBytes(b, cmd.Process.Pid) - before
				b.ReportMetric(float64(grew)/(1<<20), "rss_growth_MiB")
				if side.name == "planned" {
					b.ReportMetric(float64(sz.PromptCacheBytes)/(1<<20), "cache_MiB")
				}
				benchClient.CloseIdleConnections()
				llamatest.Stop(cmd)
			}
		})
	}
}

// sizedChatModel is a tiny chat model, its header, and its sizing on the
// CPU as ask asks against nodes, as the plan sizes it for the engine.
func sizedChatModel(tb testing.TB, name string, ask plan.Ask, nodes []plan.Node) (catalog.Model, gguf.Header, plan.Sizing) {
	tb.Helper()
	m := chatModel(tb, name, ggufgen.Spec{})
	h, err := gguf.Read(context.Background(), m.Source)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := os.Stat(m.Source)
	if err != nil {
		tb.Fatal(err)
	}
	return m, h, plan.Size(plan.Model{Header: h, WeightsBytes: st.Size()}, plan.Option{CPU: true}, ask, nodes)
}

// residentBytes is process pid's resident memory (VmRSS).
func residentBytes(b *testing.B, pid int) int64 {
	b.Helper()
	s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range strings.Split(string(s), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	b.Fatalf("no VmRSS for process %d", pid)
	return 0
}

// BenchmarkPromptCacheReuse: 4 replicas of one slot each, 16 tenants each
// with its own system prompt of about 2,000 tokens, 8 requests each in a
// random order from 4 clients through the gateway, once with the prompt
// cache sized as it was (one slot's KV cache) and once as the plan sizes
// it now (a budget of several prompts, counted in the replica's memory).
// Reported for each: the prompt tokens the engines took from their caches
// (timings.cache_n) as a share of what an oracle would (every token a
// request shares with an earlier one of its tenant, from its second on;
// goal ≥ 0.95 planned), the cache and the memory each replica is placed
// by, in MiB.
func BenchmarkPromptCacheReuse(b *testing.B) {
	e := mustEnv(b, Options{MaxQueue: 256})
	const slot = 4096
	base, h, sz := sizedChatModel(b, "reuse", plan.Ask{CtxPool: slot, ContextLength: slot}, e.fleet.Pool())
	oneSlot := int64(slot) * h.KVBytesPerToken() >> 20 << 20
	if sz.PromptCacheBytes <= oneSlot {
		b.Fatalf("the plan gave a prompt cache of %d bytes, no more than the old sizing's one slot (%d): %s", sz.PromptCacheBytes, oneSlot, sz.Reason)
	}
	sides := []struct {
		name  string
		cache int64
	}{{"one_slot", oneSlot}, {"planned", sz.PromptCacheBytes}}
	for _, s := range sides {
		m := base
		m.Name, m.ContextLength, m.Scaling = s.name, slot, catalog.Scaling{Min: 4, Max: 4}
		p := &m.Profiles[0]
		p.Size = catalog.SizeForSlots(1, slot)
		p.PromptCacheBytes, p.RAMBytes = s.cache, sz.NeedBytes-sz.PromptCacheBytes+s.cache
		e.mustAdd(m)
	}
	for _, s := range sides {
		e.waitServing(s.name, 4)
	}
	engine := e.fleet.Serving("planned")[0]

	const tenants, each, clients = 16, 8, 4
	run := 0
	for b.Loop() {
		// New tenants each time, so nothing is cached from the last.
		run++
		rng := rand.New(rand.NewPCG(uint64(run), 46))
		systems := tenantPrompts(rng, tenants, run)
		var order []int
		for t := range tenants {
			for range each {
				order = append(order, t)
			}
		}
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		msgs := make([][]map[string]string, len(order))
		for i, t := range order {
			msgs[i] = tenantMessages(systems[t], i)
		}
		oracle := oracleReuse(b, engine.Endpoint, e.fleet.EngineKey(engine.ID), order, msgs)
		var total int
		for _, o := range oracle {
			total += o
		}
		for _, s := range sides {
			as, _ := runLoad(b, len(order), clients, func(i int) (string, string, []byte) {
				body, _ := json.Marshal(map[string]any{"model": s.name, "max_tokens": 1, "messages": msgs[i]})
				return e.url + "/v1/chat/completions", e.token, body
			})
			var cached int
			for i, a := range as {
				if oracle[i] > 0 {
					cached += a.cacheN
				}
			}
			b.ReportMetric(float64(cached)/float64(max(total, 1)), s.name+"_share_of_oracle")
			b.ReportMetric(meanMS(as), s.name+"_mean_ms")
			b.ReportMetric(float64(s.cache)/(1<<20), s.name+"_cache_MiB")
			b.ReportMetric(float64(sz.NeedBytes-sz.PromptCacheBytes+s.cache)/(1<<20), s.name+"_replica_MiB")
		}
	}
}

// tenantPrompts are n system prompts of about 2,000 tokens (the tiny
// model's vocabulary has few words: most characters are a token each),
// each its own from its first characters; run tells runs apart.
func tenantPrompts(rng *rand.Rand, n, run int) []string {
	out := make([]string, n)
	for i := range out {
		var sb strings.Builder
		fmt.Fprintf(&sb, "Tenant %d of run %d. ", i, run)
		for sb.Len() < 1900 {
			sb.WriteByte(byte('a' + rng.IntN(26)))
		}
		out[i] = sb.String()
	}
	return out
}

// tenantMessages is request i of a tenant with system prompt system.
func tenantMessages(system string, i int) []map[string]string {
	return []map[string]string{{"role": "system", "content": system}, {"role": "user", "content": fmt.Sprintf("question %d", i)}}
}

// oracleReuse is, for each request in order (its tenant's, its messages),
// the prompt tokens an engine that forgot nothing would take from its
// cache: the longest run it shares with an earlier request of its tenant,
// less the one token an engine always evaluates; 0 for a tenant's first.
// The prompts are the engine's own (its chat template, its tokenizer).
func oracleReuse(b testing.TB, url, key string, order []int, msgs [][]map[string]string) []int {
	b.Helper()
	tokens := make([][]int, len(order))
	for i := range order {
		var tpl struct {
			Prompt string `json:"prompt"`
		}
		engineCall(b, url+"/apply-template", key, map[string]any{"messages": msgs[i]}, &tpl)
		var tok struct {
			Tokens []int `json:"tokens"`
		}
		engineCall(b, url+"/tokenize", key, map[string]any{"content": tpl.Prompt}, &tok)
		tokens[i] = tok.Tokens
	}
	out := make([]int, len(order))
	for i, t := range order {
		for j := range i {
			if order[j] == t {
				out[i] = max(out[i], min(commonPrefix(tokens[i], tokens[j]), len(tokens[i])-1))
			}
		}
	}
	return out
}

// commonPrefix is how many tokens a and b begin with alike.
func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// engineCall posts body to an engine's url with key and decodes its
// answer into out.
func engineCall(b testing.TB, url, key string, body, out any) {
	b.Helper()
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := benchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %d %s", url, resp.StatusCode, got)
	}
	if err := json.Unmarshal(got, out); err != nil {
		b.Fatalf("%s: %v in %s", url, err, got)
	}
}
