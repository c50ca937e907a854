package llamatest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"modelserve/internal/engine"
)

func TestInstalledEngineNamesItsBuild(t *testing.T) {
	v, err := engine.ReadVersion(context.Background(), Path(t))
	if err != nil {
		t.Fatal(err)
	}
	if v.Build <= 0 {
		t.Fatalf("the installed llama-server says %q, with no build number", v.Text)
	}
	t.Logf("llama-server %s (%s)", v, v.Text)
}

func TestSlowPathWaitsThenServes(t *testing.T) {
	const delay = 700 * time.Millisecond
	start := time.Now()
	cmd := Command(t, "--version")
	cmd.Path = SlowPath(t, delay)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if took := time.Since(start); took < delay {
		t.Errorf("answered after %s, before the %s delay", took, delay)
	}
	if _, ok := engine.ParseVersion(string(out)); !ok {
		t.Errorf("the slow engine is not llama-server: it printed %q", out)
	}
}

func TestStartServesAndStopEndsIt(t *testing.T) {
	url, cmd := Start(t, "--model", "/nonexistent.gguf")
	// No model: llama-server exits, and WaitReady's deadline is not needed
	// to tell; a request to the port is refused.
	_ = cmd.Wait()
	if cmd.ProcessState.ExitCode() == 0 {
		t.Error("llama-server exited 0 without its model")
	}
	if resp, err := http.Get(url + "/health"); err == nil {
		resp.Body.Close()
		t.Errorf("%s still answers after its engine exited", url)
	}
	Stop(cmd) // reaped already: a no-op, not a kill of a reused id
}
