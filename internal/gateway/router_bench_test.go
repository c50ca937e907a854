package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/ggufgen"
	"modelserve/internal/llamatest"
	"modelserve/internal/testlog"
)

// BenchmarkRouterMode: llama.cpp's own router (llama-server --models-dir,
// --models-max: it starts an engine for a model on its first request)
// beside modelserve, on the same engine build, file and flags, in one run:
// the cold first request of each (from the request to the first token of a
// model not loaded), then throughput and p50 at 1 and 8 clients against
// the engine asked directly. Reported: router/direct and modelserve/direct
// throughput, the p50 each adds, and both cold starts. Each runs the build
// as it is installed: the router as Debian ships it, modelserve as
// install-llama-server.sh lays it out (through its wrapper script, with
// the CPU backends ggml chose for this machine).
func BenchmarkRouterMode(b *testing.B) {
	bin, env := routerEngine(b)
	const slots, pool = 4, 4096
	dir := b.TempDir()
	if err := ggufgen.WriteFile(filepath.Join(dir, "tiny.gguf"), ggufgen.Spec{}); err != nil {
		b.Fatal(err)
	}
	// The flags modelserve's fleet gives the same profile's engine
	// (fleet.EngineArgs), but the model and its name: the router passes
	// its own on to the engine it starts, with the model's name as
	// --alias.
	port := llamatest.FreePort(b)
	routerURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	args := []string{"--models-dir", dir, "--models-max", "1", "--api-key", "k", "--host", "127.0.0.1", "--port", fmt.Sprint(port)}
	flags := fleet.EngineArgs(catalog.Model{Name: "tiny"}, catalog.Profile{Size: catalog.Size{Pool: pool, Slots: slots}}, "", "", 1)
	for i := 0; i < len(flags); i++ {
		if flags[i] == "-m" || flags[i] == "--alias" {
			i++ // and its value
			continue
		}
		args = append(args, flags[i])
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	out := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		llamatest.Stop(cmd)
		if b.Failed() {
			b.Logf("the router's output:\n%s", out.String())
		}
	})
	llamatest.WaitReady(b, routerURL, readyWithin)

	e := mustEnv(b, Options{MaxQueue: 256})
	entry := func(name string) catalog.Model {
		m := chatModel(b, name, ggufgen.Spec{})
		m.Source = filepath.Join(dir, "tiny.gguf")
		m.Profiles[0].Pool, m.Profiles[0].Slots = pool, slots
		m.Profiles[0].RAMBytes = 0
		m.Scaling = catalog.Scaling{Min: 0, Max: 1} // loaded on its first request, as the router's
		return m
	}

	// An entry added is looked up afresh (names.go reads the catalog
	// again on a miss only 100 ms after its last read).
	add := func(name string) {
		e.mustAdd(entry(name))
		e.gw.names.refresh()
	}

	// Cold starts, in turns: the router's model unloaded after each
	// (POST /models/unload), modelserve's entry removed and another
	// added. One alone, on a busy machine, was as likely a slow moment.
	cold := func(url, key, model string) time.Duration {
		b.Helper()
		body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 1, "stream": true,
			"messages": []map[string]string{{"role": "user", "content": "hi"}}})
		a, err := call(url+"/v1/chat/completions", key, body)
		if err != nil {
			b.Fatal(err)
		}
		return a.first
	}
	var routerColds, gatewayColds []time.Duration
	for i := range coldRounds {
		routerColds = append(routerColds, cold(routerURL, "k", "tiny"))
		unload(b, routerURL, "tiny")
		name := fmt.Sprintf("cold-%d", i)
		add(name)
		gatewayColds = append(gatewayColds, cold(e.url, e.token, name))
		if err := e.cat.Remove(context.Background(), name); err != nil {
			b.Fatal(err)
		}
		waitGone(b, e.fleet, name)
	}
	slices.Sort(routerColds)
	slices.Sort(gatewayColds)
	routerCold, gatewayCold := routerColds[coldRounds/2], gatewayColds[coldRounds/2]

	add("tiny")
	cold(e.url, e.token, "tiny")
	cold(routerURL, "k", "tiny")
	rep := e.waitServing("tiny", 1)[0]
	key := e.fleet.EngineKey(rep.ID)

	body, _ := json.Marshal(map[string]any{"model": "tiny", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": "Say hello."}}})
	direct := func(int) (string, string, []byte) { return rep.Endpoint + "/v1/chat/completions", key, body }
	router := func(int) (string, string, []byte) { return routerURL + "/v1/chat/completions", "k", body }
	gateway := func(int) (string, string, []byte) { return e.url + "/v1/chat/completions", e.token, body }
	for _, conc := range []int{1, 8} {
		b.Run(fmt.Sprintf("conc=%d", conc), func(b *testing.B) {
			n := max(conc*4, b.N)
			for _, to := range []func(int) (string, string, []byte){direct, router, gateway} {
				runLoad(b, conc, conc, to) // warm the connections
			}
			var da, ra, ga []answer
			var dt, rt, gt time.Duration
			turn := max(conc*2, n/turns)
			sides := []struct {
				to func(int) (string, string, []byte)
				as *[]answer
				t  *time.Duration
			}{{direct, &da, &dt}, {router, &ra, &rt}, {gateway, &ga, &gt}}
			// Which side goes first moves on every round, as alternate
			// does for two: in a fixed order, the side after another
			// measured a few percent slower whatever it was.
			for round, done := 0, 0; done < n || round%len(sides) != 0; round, done = round+1, done+turn {
				for k := range sides {
					side := sides[(round+k)%len(sides)]
					a, t := runLoad(b, turn, conc, side.to)
					*side.as, *side.t = append(*side.as, a...), *side.t+t
					dropIdle(e.gw)
				}
			}
			rate := func(as []answer, t time.Duration) float64 { return float64(len(as)) / t.Seconds() }
			p50 := func(as []answer) time.Duration { return quantile(as, .5, took) }
			b.ReportMetric(rate(ra, rt)/rate(da, dt), "router_throughput_ratio")
			b.ReportMetric(rate(ga, gt)/rate(da, dt), "modelserve_throughput_ratio")
			b.ReportMetric(float64(p50(ra)-p50(da))/1e6, "router_added_p50_ms")
			b.ReportMetric(float64(p50(ga)-p50(da))/1e6, "modelserve_added_p50_ms")
			b.ReportMetric(rate(da, dt), "direct_req/s")
		})
	}
	b.Run("cold", func(b *testing.B) {
		// Measured before the others, the median of coldRounds each.
		b.ReportMetric(float64(routerCold)/1e6, "router_first_token_ms")
		b.ReportMetric(float64(gatewayCold)/1e6, "modelserve_first_token_ms")
		b.ReportMetric(float64(gatewayCold)/float64(routerCold), "modelserve_router_ratio")
	})
}

// coldRounds is how many cold starts of each are measured.
const coldRounds = 9

// unload asks the router to stop the engine of model, and waits until it
// says the model is not loaded.
func unload(b *testing.B, routerURL, model string) {
	b.Helper()
	body, _ := json.Marshal(map[string]string{"model": model})
	req, _ := http.NewRequest(http.MethodPost, routerURL+"/models/unload", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer k")
	req.Header.Set("Content-Type", "application/json")
	resp, err := benchClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, routerURL+"/models", nil)
		req.Header.Set("Authorization", "Bearer k")
		resp, err := benchClient.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var list struct {
			Data []struct {
				ID     string `json:"id"`
				Status struct {
					Value string `json:"value"`
				} `json:"status"`
			} `json:"data"`
		}
		err = json.NewDecoder(resp.Body).Decode(&list)
		resp.Body.Close()
		if err != nil {
			b.Fatalf("the router's /models: %v", err)
		}
		loaded := false
		for _, m := range list.Data {
			loaded = loaded || m.ID == model && m.Status.Value != "unloaded"
		}
		if !loaded {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.Fatalf("the router did not unload %s within 20s", model)
}

// routerEngine is the llama-server to run in router mode, and what it
// needs added to its environment, or skips the benchmark with why when it
// has no router mode.
//
// The router starts each model's engine by running its own executable
// again (/proc/self/exe). The installed copy runs through the C library it
// was built against, its loader named in a wrapper script: /proc/self/exe
// is then that loader, and every engine the router starts fails. A copy
// of the engine whose program interpreter names the bundled loader (a
// path of the same length, padded) runs itself again as it should.
func routerEngine(b *testing.B) (string, []string) {
	path := llamatest.Path(b)
	help, _ := llamatest.Command(b, "--help").CombinedOutput()
	if !strings.Contains(string(help), "--models-dir") {
		b.Skip("the installed llama-server has no router mode (--models-dir): nothing to compare modelserve with")
	}
	script, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	if !bytes.HasPrefix(script, []byte("#!")) {
		return path, nil // an engine of the operator's: it runs itself again as it is
	}
	// The wrapper's last line: exec "$lib/ld-linux-x86-64.so.2" --library-path LIBS 'ENGINE' "$@".
	var lib, libs, real string
	for _, line := range strings.Split(string(script), "\n") {
		if v, ok := strings.CutPrefix(line, "lib='"); ok {
			lib = strings.TrimSuffix(v, "'")
		}
		if f := strings.Fields(line); len(f) >= 5 && f[0] == "exec" && f[2] == "--library-path" {
			libs, real = strings.ReplaceAll(strings.Trim(f[3], `"`), "$lib", lib), strings.Trim(f[4], "'")
		}
	}
	elf, err := os.ReadFile(real)
	if lib == "" || real == "" || err != nil {
		b.Skipf("the installed llama-server is a wrapper this benchmark does not know how to run in router mode (%v)", err)
	}
	const interp = "/lib64/ld-linux-x86-64.so.2\x00"
	short, err := os.MkdirTemp("", "ld")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(short) })
	loader := filepath.Join(short, "ld.so")
	if len(loader) >= len(interp) || bytes.Count(elf, []byte(interp)) != 1 {
		b.Skip("the installed llama-server cannot be given its bundled loader: router mode not compared")
	}
	if err := os.Symlink(filepath.Join(lib, "ld-linux-x86-64.so.2"), loader); err != nil {
		b.Fatal(err)
	}
	padded := append([]byte(loader), make([]byte, len(interp)-len(loader))...)
	// ggml looks for its CPU backends beside the executable: there, the
	// ones Debian ships, all of which it opens at each start to choose
	// one, as Debian's llama-server does from the folder they are
	// installed in. (The installed copy modelserve runs keeps only the
	// one chosen for this machine and the baseline: install-llama-server.sh.)
	home := b.TempDir()
	backends, _ := filepath.Glob(filepath.Join(lib, "ggml", "backends0", "libggml-cpu-*.so"))
	for _, so := range backends {
		if err := os.Symlink(so, filepath.Join(home, filepath.Base(so))); err != nil {
			b.Fatal(err)
		}
	}
	bin := filepath.Join(home, "llama-server")
	if err := os.WriteFile(bin, bytes.Replace(elf, []byte(interp), padded, 1), 0o755); err != nil {
		b.Fatal(err)
	}
	return bin, []string{"LD_LIBRARY_PATH=" + libs}
}
