// Package jaegertest runs the real Jaeger (v2, all-in-one, in-memory
// storage) on loopback for tests, and reads traces back through its query
// API. install.sh builds it from the Go module proxy into the cache folder
// (make jaeger); a test skips without it, or fails under
// MODELSERVE_REQUIRE_JAEGER=1.
package jaegertest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

const version = "1.76.0"

// Path is the jaeger binary install.sh built.
func Path(t testing.TB) string {
	t.Helper()
	cache := os.Getenv("MODELSERVE_CACHE")
	if cache == "" {
		base := os.Getenv("XDG_CACHE_HOME")
		if base == "" {
			home, _ := os.UserHomeDir()
			base = filepath.Join(home, ".cache")
		}
		cache = filepath.Join(base, "modelserve")
	}
	p := filepath.Join(cache, "jaeger-"+version, "bin", "jaeger")
	if _, err := os.Stat(p); err != nil {
		msg := "jaeger v" + version + " is not built: run make jaeger (internal/trace/jaegertest/install.sh)"
		if os.Getenv("MODELSERVE_REQUIRE_JAEGER") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return p
}

// Jaeger is a running Jaeger: OTLP is its traces endpoint, Query its
// query API's address.
type Jaeger struct {
	OTLP, Query string
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Start runs Jaeger until the test ends.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := Path(t)
	otlp, query, qgrpc, health := freePort(t), freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf(`service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_query:
    storage:
      traces: mem
    http:
      endpoint: 127.0.0.1:%d
    grpc:
      endpoint: 127.0.0.1:%d
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 10000
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 127.0.0.1:%d
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:%d
processors:
  batch:
    timeout: 50ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`, query, qgrpc, health, otlp)
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "jaeger.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", path)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("jaeger's log:\n%s", b)
		}
	})
	j := &Jaeger{OTLP: "http://127.0.0.1:" + strconv.Itoa(otlp) + "/v1/traces", Query: "http://127.0.0.1:" + strconv.Itoa(query)}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(health) + "/status")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logf.Name())
			t.Fatalf("jaeger exited at its start:\n%s", b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("jaeger was not healthy within 60s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	return j
}

// Span is one span as Jaeger's query API returns it.
type Span struct {
	TraceID, SpanID, Name, Service string
	Parent                         string // the CHILD_OF reference's span id
	Tags                           map[string]string
}

// Trace waits (up to 30s) for a trace holding a span of each of names,
// and returns its spans. A span ends, and is exported, after those it
// follows: waiting for a count of them, a trace could be taken whole
// before its last span (a job's root, which ends once the job is told
// ended) had come. With no names it returns what Jaeger has now.
func (j *Jaeger) Trace(t testing.TB, traceID string, names ...string) []Span {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var spans []Span
	for {
		spans = j.get(t, traceID)
		missing := slices.DeleteFunc(slices.Clone(names), func(n string) bool {
			return slices.ContainsFunc(spans, func(s Span) bool { return s.Name == n })
		})
		if len(missing) == 0 {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger has %d spans of trace %s, and none named %q", len(spans), traceID, missing)
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (j *Jaeger) get(t testing.TB, traceID string) []Span {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/traces/"+traceID, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil
	}
	var v struct {
		Data []struct {
			Spans []struct {
				TraceID, SpanID, OperationName, ProcessID string
				References                                []struct{ RefType, SpanID string }
				Tags                                      []struct {
					Key   string
					Value any
				}
			}
			Processes map[string]struct{ ServiceName string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("jaeger's answer for trace %s: %v", traceID, err)
	}
	var out []Span
	for _, d := range v.Data {
		for _, s := range d.Spans {
			sp := Span{TraceID: s.TraceID, SpanID: s.SpanID, Name: s.OperationName, Service: d.Processes[s.ProcessID].ServiceName, Tags: map[string]string{}}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" {
					sp.Parent = r.SpanID
				}
			}
			for _, tg := range s.Tags {
				sp.Tags[tg.Key] = fmt.Sprint(tg.Value)
			}
			out = append(out, sp)
		}
	}
	return out
}

// Services is the services Jaeger has seen traces of.
func (j *Jaeger) Services(t testing.TB) []string {
	t.Helper()
	resp, err := http.Get(j.Query + "/api/services")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v struct{ Data []string }
	json.NewDecoder(resp.Body).Decode(&v)
	return v.Data
}
