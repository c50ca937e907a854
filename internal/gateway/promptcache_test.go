package gateway

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/llamatest"
	"modelserve/internal/plan"
)

// TestPromptCacheKeepsATenantsPrefix: the engine as modelserve starts it,
// one slot and the prompt cache the plan sizes, asked by a tenant, then by
// four others in turn, then by the first again: the first's long system
// prompt comes back from the cache (timings.cache_n), not read again.
// Sized to one slot's KV cache, as before, the others pushed it out.
func TestPromptCacheKeepsATenantsPrefix(t *testing.T) {
	node := plan.Node{Name: "n", CPUCores: 4, RAMBytes: 16 << 30, FreeRAMBytes: 16 << 30}
	m, _, sz := sizedChatModel(t, "tenants", plan.Ask{CtxPool: 4096, ContextLength: 4096}, []plan.Node{node})
	p := m.Profiles[0]
	p.Size, p.PromptCacheBytes, p.RAMBytes = catalog.SizeForSlots(1, 4096), sz.PromptCacheBytes, sz.NeedBytes
	url, cmd := llamatest.Start(t, append(fleet.EngineArgs(m, p, m.Source, "", 1), "--api-key", "k")...)
	defer llamatest.Stop(cmd)
	llamatest.WaitReady(t, url, time.Minute)

	systems := tenantPrompts(rand.New(rand.NewPCG(46, 1)), 5, 0)
	order := []int{0, 1, 2, 3, 4, 0}
	msgs := make([][]map[string]string, len(order))
	for i, tenant := range order {
		msgs[i] = tenantMessages(systems[tenant], i)
	}
	oracle := oracleReuse(t, url, "k", order, msgs)
	var last answer
	for i := range order {
		body, _ := json.Marshal(map[string]any{"model": m.Name, "max_tokens": 1, "messages": msgs[i]})
		var err error
		if last, err = call(url+"/v1/chat/completions", "k", body); err != nil {
			t.Fatal(err)
		}
	}
	want := oracle[len(order)-1]
	if want < 1000 || last.cacheN < want {
		t.Errorf("with a prompt cache of %d bytes (%s), the first tenant's request after four others took %d tokens from the cache and read %d; want the %d it shares with its first",
			sz.PromptCacheBytes, sz.Reason, last.cacheN, last.promptN, want)
	}
}
