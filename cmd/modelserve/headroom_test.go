package main

import (
	"io"
	"modelserve/internal/engine"
	"net/http"
	"os"
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/plan"
)

// TestHeadroomIsKeptFromThePlan: the memory --headroom keeps free is
// never offered. With all but 50 MB of this machine kept, a tiny model
// the machine holds many times over is planned to fit nowhere, and the
// nodes say what is kept.
func TestHeadroomIsKeptFromThePlan(t *testing.T) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Skip("no /proc/meminfo to size the headroom by")
	}
	total, _, err := engine.ParseMeminfo(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 4096})
	headroom := total - 50<<20
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: hub.URL(), Headroom: headroom})

	var nodes struct {
		Nodes []struct {
			RAMBytes int64 `json:"ram_bytes"`
		} `json:"nodes"`
		Fleet []struct {
			RAMBytes      int64 `json:"ram_bytes"`
			FreeBytes     int64 `json:"free_bytes"`
			HeadroomBytes int64 `json:"headroom_bytes"`
		} `json:"fleet"`
	}
	if code := s.do("GET", "/api/v1/nodes", nil, &nodes); code != http.StatusOK || len(nodes.Nodes) != 1 || len(nodes.Fleet) != 1 {
		t.Fatalf("the nodes: %d %+v", code, nodes)
	}
	// The planner's pool has what may be promised; the fleet's node its
	// whole memory, and what is kept of it.
	if n := nodes.Nodes[0]; n.RAMBytes > 51<<20 {
		t.Errorf("the planner's node has %d bytes; want the 50 MB the headroom leaves", n.RAMBytes)
	}
	if n := nodes.Fleet[0]; n.RAMBytes != total || n.HeadroomBytes != headroom || n.FreeBytes > 50<<20 {
		t.Errorf("the fleet's node: %+v; want %d bytes, %d of them kept and at most 50 MB free", n, total, headroom)
	}
	var repo struct {
		Plan plan.Plan `json:"plan"`
	}
	if code := s.do("GET", "/api/v1/repos/acme/Tiny-Llama-GGUF", nil, &repo); code != http.StatusOK || len(repo.Plan.Options) == 0 {
		t.Fatalf("the repository: %d %+v", code, repo)
	}
	for _, o := range repo.Plan.Options {
		if o.CPU && o.Fit != plan.FitsNowhere {
			t.Errorf("%s on CPUs plans as %q (%s); want it to fit nowhere once the headroom is kept", o.Artifact, o.Fit, o.Why)
		}
	}
}

// TestHeadroomSetting: --headroom (MODELSERVE_HEADROOM) is 1 GiB unless
// given, none beside --local-memory (a margin of the operator's already),
// 0 when asked, and anything else is refused in a sentence.
func TestHeadroomSetting(t *testing.T) {
	env := func(k, v string) func(string) string {
		return func(key string) string {
			if key == k {
				return v
			}
			return ""
		}
	}
	for _, tt := range []struct {
		name string
		args []string
		env  func(string) string
		want int64
	}{
		{"default", nil, env("", ""), 1 << 30},
		{"flag", []string{"--headroom", "512MiB"}, env("", ""), 512 << 20},
		{"env", nil, env("MODELSERVE_HEADROOM", "2GiB"), 2 << 30},
		{"none", []string{"--headroom", "0"}, env("", ""), 0},
		{"beside a budget", []string{"--local-memory", "12GiB"}, env("", ""), 0},
		{"beside a budget, asked", []string{"--local-memory", "12GiB", "--headroom", "1GiB"}, env("", ""), 1 << 30},
	} {
		cfg, err := parseServe(tt.args, tt.env, io.Discard)
		if err != nil || cfg.Headroom != tt.want {
			t.Errorf("%s: headroom %d, %v; want %d", tt.name, cfg.Headroom, err, tt.want)
		}
	}
	for _, bad := range []string{"lots", "-1GB", "2TiB"} {
		if _, err := parseServe([]string{"--headroom", bad}, env("", ""), io.Discard); err == nil || !strings.Contains(err.Error(), "--headroom is the memory kept free") {
			t.Errorf("--headroom %q: %v; want it refused in a sentence", bad, err)
		}
	}
}
