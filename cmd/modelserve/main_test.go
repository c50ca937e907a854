package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"modelserve/internal/canary"
	"modelserve/internal/llamatest"
	"modelserve/internal/testlog"
)

func TestConfigPrecedence(t *testing.T) {
	env := map[string]string{
		"MODELSERVE_ADDR": "127.0.0.1:9000",
		"HF_ENDPOINT":     "http://127.0.0.1:7000/",
		"HF_TOKEN":        "hf_env",
	}
	getenv := func(k string) string { return env[k] }
	// The canary's settings, the headroom, the drain bound and the
	// residency at their defaults, as read.
	policy := canary.DefaultPolicy
	policy.MinRequests, policy.Window = 50, 30*time.Minute
	canaryDefaults := func(c config) config {
		c.CanaryShareText, c.CanaryRequestsText, c.CanaryWindowText = "0.1", "50", "30m"
		c.CanaryShare, c.CanaryPolicy = 0.1, policy
		c.Headroom = 1 << 30 // --headroom's default, as read
		c.DrainTimeoutText, c.DrainTimeout = "10m", 10*time.Minute
		c.ResidencyText, c.Residency = "5s", 5*time.Second
		return c
	}
	tests := []struct {
		name string
		args []string
		want config
	}{
		{"environment over defaults", nil, canaryDefaults(config{Addr: "127.0.0.1:9000", Data: "./data",
			HFEndpoint: "http://127.0.0.1:7000", HFToken: "hf_env", LogFormat: "text", LogLevel: "info",
			UpdateEvery: "6h", UpdateInterval: 6 * time.Hour})},
		{"flags over environment", []string{"--addr", "127.0.0.1:1", "--hf-token", "hf_flag", "--data", "/srv/ms",
			"--llama-server", "/opt/llama-server", "--models-dir", "/models", "--update-interval", "0"},
			canaryDefaults(config{Addr: "127.0.0.1:1", Data: "/srv/ms", HFEndpoint: "http://127.0.0.1:7000", HFToken: "hf_flag",
				LlamaServer: "/opt/llama-server", ModelsDir: "/models", LogFormat: "text", LogLevel: "info", UpdateEvery: "0"})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseServe(tt.args, getenv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// TestUpdateIntervalFlag: the interval comes from the flag or the
// environment, and one that is not a duration, or too short, is a usage
// error naming the flag.
func TestUpdateIntervalFlag(t *testing.T) {
	env := func(k string) string {
		if k == "MODELSERVE_UPDATE_INTERVAL" {
			return "30m"
		}
		return ""
	}
	if c, err := parseServe(nil, env, io.Discard); err != nil || c.UpdateInterval != 30*time.Minute {
		t.Errorf("from the environment: %s, %v; want 30m", c.UpdateInterval, err)
	}
	for _, bad := range []string{"5s", "weekly", "-1h"} {
		_, err := parseServe([]string{"--update-interval", bad}, env, io.Discard)
		var ue usageError
		if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "--update-interval: the interval between checks is") {
			t.Errorf("--update-interval %s: %v, want a usage error naming the flag", bad, err)
		}
	}
}

func TestHelpNamesEveryFlagAndVariable(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"serve", "--help"}, func(string) string { return "" }, nil, &out, &out)
	if err == nil {
		t.Fatal("--help returned no error; main relies on flag.ErrHelp to exit quietly")
	}
	for _, s := range (&config{}).settings() {
		if !strings.Contains(out.String(), "-"+s.flag) || !strings.Contains(out.String(), s.env) {
			t.Errorf("--help does not explain --%s and %s:\n%s", s.flag, s.env, out.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	err := run(context.Background(), []string{"frobnicate"}, os.Getenv, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `"frobnicate" is not a command`) {
		t.Fatalf("got %v", err)
	}
}

// TestServeAndShutDown starts the server on a free port with a fresh data
// directory, checks /healthz, then cancels as SIGTERM would and expects serve
// to return once everything has stopped.
func TestServeAndShutDown(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	go func() {
		done <- serve(ctx, config{Addr: "127.0.0.1:0", Data: dir}, log, func(a string) { addrc <- a })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		t.Fatalf("serve stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not start listening")
	}

	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"ok"`) {
		t.Fatalf("/healthz: %s %s", resp.Status, body)
	}
	if _, err := os.Stat(filepath.Join(dir, "modelserve.db")); err != nil {
		t.Errorf("the database was not created in the data directory: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve returned %v on shutdown", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
		t.Error("the server still answers after shutdown")
	}
}

func TestTokenCommands(t *testing.T) {
	dir := madeDataDir(t)
	ctx := context.Background()
	env := func(string) string { return "" }
	var out, errb bytes.Buffer
	if err := run(ctx, []string{"token", "create", "--data", dir, "deploy"}, env, nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out.String())
	if !strings.HasPrefix(tok, "ms_") || len(tok) < 40 {
		t.Fatalf("token create printed %q", tok)
	}
	out.Reset()
	if err := run(ctx, []string{"token", "list", "--data", dir}, env, nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "deploy") || strings.Contains(out.String(), tok) {
		t.Errorf("token list: %q (want the name, never the token)", out.String())
	}
	if err := run(ctx, []string{"token", "revoke", "--data", dir, "deploy"}, env, nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	err := run(ctx, []string{"token", "revoke", "--data", dir, "deploy"}, env, nil, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `no token is called "deploy"`) {
		t.Errorf("revoking twice: %v", err)
	}
}

// TestServeFindsTheInstalledEngine: with no --llama-server and none on
// PATH, serve uses the copy install-llama-server.sh put in the cache and
// says so once, with its build, as `make run` on a fresh machine relies on.
func TestServeFindsTheInstalledEngine(t *testing.T) {
	installed := llamatest.Path(t)
	t.Setenv("PATH", t.TempDir())
	var logs testlog.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	path, v := findEngine(context.Background(), "", log)
	if path != installed || v.Build <= 0 {
		t.Fatalf("findEngine = %q %+v, want %s with its build", path, v, installed)
	}
	line := logs.String()
	if strings.Count(line, "\n") != 1 || !strings.Contains(line, "using the installed llama-server") ||
		!strings.Contains(line, fmt.Sprintf("build=b%d", v.Build)) {
		t.Errorf("serve logged %q; want one line naming the installed engine and its build", line)
	}

	// The operator's own engine wins, and is not announced as installed.
	logs.Reset()
	if path, _ := findEngine(context.Background(), installed, log); path != installed || strings.Contains(logs.String(), "installed") {
		t.Errorf("with --llama-server: %q, log %q", path, logs.String())
	}
}
