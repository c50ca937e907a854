package catalog_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"modelserve/catalog"
)

// TestUpgradeReadsTheOldProfilesOnce: a catalog written before profiles had
// fields of their own held llama-server's arguments and one memory figure
// that meant RAM on the CPU, each card's need for a model's first profile
// on cards, and all its cards together for a fallback. Upgrade turns each
// into the fields, in the catalog and in the versions kept, and a second
// run changes nothing.
func TestUpgradeReadsTheOldProfilesOnce(t *testing.T) {
	s, db := MustOpen(t)
	ctx := context.Background()
	at := time.Now().UTC().Format(time.RFC3339Nano)
	old := []struct{ name, spec string }{
		{"chatty", `{"name":"chatty","source":"/srv/data/mirror/chatty/fb4f4f2/Chatty-Q4_K_M.gguf","context_length":1024,
			"profiles":[{"name":"cpu","engine":"llamacpp","args":["--ctx-size","2048","--parallel","2"],"min_memory_bytes":174205856,"cpu_cores":1,"priority":100,"weight":1}],
			"scaling":{"min":1,"max":1},"capabilities":{},
			"origin":{"repo":"acme/Chatty-GGUF","revision":"fb4f4f2567ad63d4360c81998e25893938749b92","files":[{"path":"Q4/Chatty-Q4_K_M-00002-of-00002.gguf","bytes":477184},{"path":"Q4/Chatty-Q4_K_M-00001-of-00002.gguf","bytes":477184},{"path":"mmproj-Chatty-F16.gguf","bytes":1000}]}}`},
		{"wide", `{"name":"wide","context_length":4096,
			"profiles":[{"name":"gpu-2xl4","engine":"llamacpp","args":["--ctx-size","16384","--parallel","4"],"gpu_class":"L4","gpus_per_node":2,"min_memory_bytes":12884901888,"priority":100,"weight":1},
			{"name":"gpu-4xl4","engine":"llamacpp","args":["--ctx-size","16384","--parallel","4"],"gpu_class":"L4","gpus_per_node":4,"min_memory_bytes":25769803776,"priority":90,"weight":1},
			{"name":"cpu","engine":"llamacpp","args":["--ctx-size","16384","--parallel","4"],"min_memory_gb":20,"priority":80,"weight":1}],
			"scaling":{"min":0,"max":1},"capabilities":{}}`},
		{"embed", `{"name":"embed","context_length":1024,
			"profiles":[{"name":"cpu","engine":"llamacpp","args":["--embedding","--ctx-size","4096","--parallel","4","--batch-size","1024","--ubatch-size","1024"],"min_memory_bytes":1000,"priority":100}],
			"scaling":{"min":0,"max":1},"capabilities":{"embeddings":true}}`},
		{"judge", `{"name":"judge","context_length":8192,"role":"guard","guard":{"format":"json"},
			"profiles":[{"name":"cpu","engine":"llamacpp","args":["--ctx-size","8192","--parallel","1","--cache-ram","0"],"min_memory_bytes":2000,"priority":100}],
			"scaling":{"min":0,"max":1},"capabilities":{}}`},
	}
	for _, m := range old {
		if _, err := db.Exec(`INSERT INTO models (name, class, role, added_by, added_at, spec) VALUES (?, '', '', 'test', ?, ?)`, m.name, at, m.spec); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Exec(`INSERT INTO model_versions (model, commit_sha, ref, files, profile, state, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		"chatty", "fb4f4f2567ad63d4360c81998e25893938749b92", "main", "[]",
		`{"name":"cpu","engine":"llamacpp","args":["--ctx-size","2048","--parallel","2"],"min_memory_bytes":174205856,"priority":100}`,
		catalog.VersionCurrent, at); err != nil {
		t.Fatal(err)
	}

	if err := catalog.Upgrade(ctx, db); err != nil {
		t.Fatal(err)
	}
	want := map[string][]catalog.Profile{
		"chatty": {{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 2048, Slots: 2}, RAMBytes: 174205856, CPUCores: 1, Priority: 100, Weight: 1}},
		"wide": {
			// The first profile's figure was each card's; a fallback's
			// was all its cards'.
			{Name: "gpu-2xl4", Engine: "llamacpp", Size: catalog.Size{Pool: 16384, Slots: 4}, GPUClass: "L4", GPUsPerNode: 2, CardBytes: 12 << 30, Priority: 100, Weight: 1},
			{Name: "gpu-4xl4", Engine: "llamacpp", Size: catalog.Size{Pool: 16384, Slots: 4}, GPUClass: "L4", GPUsPerNode: 4, CardBytes: 6 << 30, Priority: 90, Weight: 1},
			{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 16384, Slots: 4}, RAMBytes: 20 << 30, Priority: 80, Weight: 1},
		},
		"embed": {{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 4096, Slots: 4}, Embeddings: true, RAMBytes: 1000, Priority: 100}},
		"judge": {{Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 8192, Slots: 1}, Judge: true, RAMBytes: 2000, Priority: 100}},
	}
	check := func(when string) {
		for name, profiles := range want {
			m, err := s.Get(ctx, name)
			if err != nil {
				t.Fatalf("%s: %s: %v", when, name, err)
			}
			if len(m.Profiles) != len(profiles) {
				t.Fatalf("%s: %s has %d profiles, want %d", when, name, len(m.Profiles), len(profiles))
			}
			for i, p := range profiles {
				if got := m.Profiles[i]; got.Name != p.Name || got.Pool != p.Pool || got.Slots != p.Slots || got.CardBytes != p.CardBytes ||
					got.RAMBytes != p.RAMBytes || got.GPUsPerNode != p.GPUsPerNode || got.Embeddings != p.Embeddings || got.Judge != p.Judge ||
					got.Priority != p.Priority || got.CPUCores != p.CPUCores {
					t.Errorf("%s: %s's profile %d is %+v, want %+v", when, name, i, got, p)
				}
			}
		}
		m, _ := s.Get(ctx, "chatty")
		if m.Source == "" || m.Origin == nil || len(m.Origin.Files) != 3 || m.Scaling.Min != 1 {
			t.Errorf("%s: chatty lost what is not its profile: %+v", when, m)
		}
		// Its weights, first shard first, and its projector, told apart
		// once by their names.
		if !slices.Equal(m.Weights, []string{"Q4/Chatty-Q4_K_M-00001-of-00002.gguf", "Q4/Chatty-Q4_K_M-00002-of-00002.gguf"}) ||
			m.Projector != "mmproj-Chatty-F16.gguf" {
			t.Errorf("%s: chatty's weights %q and projector %q", when, m.Weights, m.Projector)
		}
		if m, _ := s.Get(ctx, "wide"); m.Weights != nil || m.Projector != "" {
			t.Errorf("%s: wide, with no origin, has weights %q and projector %q", when, m.Weights, m.Projector)
		}
		vs, err := s.Versions(ctx, "chatty")
		if err != nil || len(vs) != 1 || vs[0].Profile.Pool != 2048 || vs[0].Profile.Slots != 2 || vs[0].Profile.RAMBytes != 174205856 {
			t.Errorf("%s: chatty's versions %+v (%v), want its profile upgraded", when, vs, err)
		}
	}
	check("after the upgrade")
	if err := catalog.Upgrade(ctx, db); err != nil {
		t.Fatal(err)
	}
	check("after a second upgrade")
	var stale int
	if err := db.QueryRow(`SELECT count(*) FROM models WHERE spec LIKE '%"args"%' OR spec LIKE '%min_memory%' OR (spec LIKE '%"origin"%' AND spec NOT LIKE '%"weights"%')`).Scan(&stale); err != nil || stale != 0 {
		t.Errorf("%d stored models still hold the old fields (%v)", stale, err)
	}
}
