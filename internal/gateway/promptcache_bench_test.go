package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	m := chatModel(b, "cache", ggufgen.Spec{})
	h, err := gguf.Read(context.Background(), m.Source)
	if err != nil {
		b.Fatal(err)
	}
	st, _ := os.Stat(m.Source)
	sz := plan.Size(plan.Model{Header: h, WeightsBytes: st.Size()}, plan.Option{CPU: true}, plan.Ask{CtxPool: 16384, ContextLength: 4096}, nil)
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
