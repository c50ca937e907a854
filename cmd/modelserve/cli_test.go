package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/testlog"
)

// mustClient runs a client command that must succeed.
func (s *apiServer) mustClient(args ...string) (stdout, stderr string) {
	s.t.Helper()
	out, said, err := s.client("", args...)
	if err != nil {
		s.t.Fatalf("modelserve %s: %v\n%s%s", strings.Join(args, " "), err, out, said)
	}
	return out, said
}

// row is the line of a table whose first column is first, split into its
// columns; nil when there is none.
func row(table, first string) []string {
	for _, line := range strings.Split(table, "\n") {
		if cols := strings.Fields(line); len(cols) > 0 && cols[0] == first {
			return cols
		}
	}
	return nil
}

// TestCLIVerbs drives a model through its life from a terminal, each verb
// against a running server with the real engine, flags after the
// arguments as an operator types them: plan and serve at one context, list
// its state, version and replicas, ps, logs (and -f until a stop ends it),
// the jobs, update, stop and rm; every listing's -o json parses, and the
// errors name the command to run next, not an API route.
func TestCLIVerbs(t *testing.T) {
	hub := hubtest.New(t)
	tinyRepo(t, hub, "acme/Tiny-Llama-GGUF", "Tiny-Llama-Q4_K_M.gguf", ggufgen.Spec{ContextLength: 8192})
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: madeDataDir(t), HFEndpoint: hub.URL()})
	commit := hub.Commit("acme/Tiny-Llama-GGUF", "main")[:7]

	// plan --context is what serve --context is: the tokens of a request.
	out, _ := s.mustClient("model", "plan", "acme/Tiny-Llama-GGUF", "--context", "8192")
	if r := row(out, "Tiny-Llama-Q4_K_M"); len(r) < 7 || !slices.Contains(r, "8192×2") {
		t.Errorf("model plan --context 8192 does not plan 8192 tokens a request:\n%s", out)
	}

	out, said := s.mustClient("model", "serve", "acme/Tiny-Llama-GGUF", "--context", "2048", "--wait")
	if !strings.Contains(out, "tiny-llama is served") {
		t.Fatalf("model serve ... --wait:\n%s", out)
	}
	jobID := strings.TrimSpace(strings.TrimPrefix(said, "job "))

	out, _ = s.mustClient("model", "list")
	if r := row(out, "tiny-llama"); strings.Join(r, " ") != "tiny-llama ready 1/1 "+commit+" 2048 acme/Tiny-Llama-GGUF" {
		t.Errorf("model list shows %q, want its state, replicas and version:\n%s", r, out)
	}
	var models []struct {
		Name   string
		Health struct{ Want, Ready int }
	}
	mustJSON(t, s, &models, "model", "list", "-o", "json")
	if len(models) != 1 || models[0].Name != "tiny-llama" || models[0].Health.Ready != 1 {
		t.Errorf("model list -o json: %+v", models)
	}

	out, _ = s.mustClient("ps")
	var replicas []struct{ ID, Model, State, Node string }
	mustJSON(t, s, &replicas, "ps", "--output", "json")
	if len(replicas) != 1 || replicas[0].Model != "tiny-llama" || replicas[0].State != "ready" {
		t.Fatalf("ps -o json: %+v", replicas)
	}
	replica := replicas[0].ID
	if r := row(out, replica); len(r) < 6 || r[1] != "tiny-llama" || r[2] != "ready" || r[3] != replicas[0].Node || !strings.HasSuffix(out, " ago\n") {
		t.Errorf("ps shows %q:\n%s", r, out)
	}

	out, _ = s.mustClient("logs", replica)
	if strings.Count(out, "\n") < 5 {
		t.Errorf("logs %s printed %d lines:\n%s", replica, strings.Count(out, "\n"), out)
	}

	out, _ = s.mustClient("job", "list")
	if r := row(out, jobID); len(r) < 4 || r[1] != "serve" || r[2] != "done" || r[3] != "tiny-llama" {
		t.Errorf("job list shows %q for the serve's job %s:\n%s", r, jobID, out)
	}
	var jobList []struct{ ID, State string }
	mustJSON(t, s, &jobList, "job", "list", "-o", "json")
	if len(jobList) != 1 || jobList[0].ID != jobID {
		t.Errorf("job list -o json: %+v", jobList)
	}
	if out, _ = s.mustClient("job", "watch", jobID); !strings.Contains(out, "smoke test done") || !strings.Contains(out, "tiny-llama is served") {
		t.Errorf("job watch %s:\n%s", jobID, out)
	}

	// Nothing new upstream: update says what to run, and --check says
	// it is up to date.
	_, _, err := s.client("", "update", "tiny-llama")
	if err == nil || !strings.Contains(err.Error(), "modelserve update --check tiny-llama") || strings.Contains(err.Error(), "/api/v1/") {
		t.Errorf("update with none available: %v", err)
	}
	if _, said = s.mustClient("update", "tiny-llama", "--check"); !strings.Contains(said, "tiny-llama is up to date at "+commit) {
		t.Errorf("update --check said %q", said)
	}

	// logs -f follows until the replica stops; stop stops it for good.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var fout, ferr testlog.Buffer
	followed := make(chan error, 1)
	go func() {
		followed <- run(ctx, []string{"logs", replica, "-f"}, s.env(s.token), nil, &fout, &ferr)
	}()
	for fout.String() == "" && ctx.Err() == nil { // its first look, before the stop
		time.Sleep(50 * time.Millisecond)
	}
	if _, said = s.mustClient("stop", "tiny-llama"); said != "1 replica of tiny-llama stopping; it starts again on its next request\n" {
		t.Errorf("stop said %q", said)
	}
	select {
	case err := <-followed:
		if err != nil || ferr.String() != "replica "+replica+" has stopped\n" {
			t.Errorf("logs -f ended with %v, saying %q", err, ferr.String())
		}
		if strings.Count(fout.String(), "\n") < 5 {
			t.Errorf("logs -f printed %q", fout.String())
		}
	case <-ctx.Done():
		t.Fatal("logs -f went on after its replica stopped")
	}
	if out, _ = s.mustClient("model", "list"); row(out, "tiny-llama")[1] != "on" {
		t.Errorf("after stop the model is not on demand:\n%s", out)
	}
	if out, _ = s.mustClient("ps"); row(out, replica) != nil {
		t.Errorf("after stop ps shows the replica:\n%s", out)
	}

	_, said = s.mustClient("rm", "tiny-llama")
	if !strings.Contains(said, "tiny-llama removed from the catalog") {
		t.Errorf("rm said %q", said)
	}
	if out, _ = s.mustClient("model", "list"); row(out, "tiny-llama") != nil {
		t.Errorf("model list after rm:\n%s", out)
	}
	_, _, err = s.client("", "rm", "tiny-llama")
	if err == nil || !strings.Contains(err.Error(), "modelserve model list lists") || strings.Contains(err.Error(), "/api/v1/") {
		t.Errorf("rm of a model the catalog does not have: %v", err)
	}
}

// env is the environment a terminal gives the client commands for s.
func (s *apiServer) env(token string) func(string) string {
	return func(k string) string {
		switch k {
		case "MODELSERVE_URL":
			return s.base
		case "MODELSERVE_TOKEN":
			return token
		}
		return ""
	}
}

// mustJSON runs a listing with -o json and reads what it printed into v.
func mustJSON(t *testing.T, s *apiServer, v any, args ...string) {
	t.Helper()
	out, _ := s.mustClient(args...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("modelserve %s printed what is not JSON: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestBinaryHelpAndCompletion runs the executable as an operator does:
// --help lists every command, each shell's completion names every command
// and parses, the address of an OpenAI client (ending in /v1) reaches the
// server, and a flag after an argument is read as a flag.
func TestBinaryHelpAndCompletion(t *testing.T) {
	dir := t.TempDir()
	bin := buildModelserve(t, dir)
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: madeDataDir(t)})
	runBin := func(env []string, args ...string) (string, string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(binaryEnv(dir), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		return out.String(), errb.String(), err
	}

	help, _, err := runBin(nil, "--help")
	if err != nil || strings.Contains(help, "--addr") {
		t.Errorf("--help: %v; want the commands, not serve's flags:\n%s", err, help)
	}
	for _, c := range commands {
		if !regexp.MustCompile(`(?m)^  ` + c.name + `\b`).MatchString(help) {
			t.Errorf("--help does not list %s:\n%s", c.name, help)
		}
	}

	for _, shell := range completionShells {
		script, _, err := runBin(nil, "completion", shell)
		if err != nil {
			t.Fatalf("completion %s: %v", shell, err)
		}
		for _, c := range commands {
			if !regexp.MustCompile(`\b` + c.name + `\b`).MatchString(script) {
				t.Errorf("the %s completion lacks %s", shell, c.name)
			}
		}
		for _, sub := range []string{"plan", "watch", "revoke"} {
			if !strings.Contains(script, sub) {
				t.Errorf("the %s completion lacks the subcommand %s", shell, sub)
			}
		}
		if path, err := exec.LookPath(shell); err == nil {
			file := filepath.Join(dir, "completion."+shell)
			if err := os.WriteFile(file, []byte(script), 0o600); err != nil {
				t.Fatal(err)
			}
			check := exec.Command(path, "-n", file)
			if shell == "fish" {
				check = exec.Command(path, "--no-execute", file)
			}
			if out, err := check.CombinedOutput(); err != nil {
				t.Errorf("%s does not parse its completion: %v\n%s", shell, err, out)
			}
		}
	}

	env := []string{"MODELSERVE_URL=" + s.base + "/v1", "MODELSERVE_TOKEN=" + s.token}
	out, said, err := runBin(env, "ps")
	if err != nil || !strings.HasPrefix(out, "REPLICA") {
		t.Errorf("ps with an address ending in /v1: %v\n%s%s", err, out, said)
	}
	out, said, err = runBin(env, "job", "list", "--output", "json")
	if err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("job list --output json after the command: %v\n%s%s", err, out, said)
	}
	_, said, err = runBin(env, "ps", "--colour")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(said, "--colour") {
		t.Errorf("an unknown flag: %v, said %q; want exit 2 naming it", err, said)
	}
	if out, _, err = runBin(nil, "version"); err != nil || !strings.HasPrefix(out, "modelserve ") {
		t.Errorf("version: %v %q", err, out)
	}
}

// TestNewLines: a follower prints each line of a replica's log once, as
// the fleet's ring drops the oldest and adds the newest.
func TestNewLines(t *testing.T) {
	for _, tc := range []struct {
		name            string
		prev, cur, want []string
	}{
		{"the first look", nil, []string{"a", "b"}, []string{"a", "b"}},
		{"nothing new", []string{"a", "b"}, []string{"a", "b"}, []string{}},
		{"lines added", []string{"a", "b"}, []string{"a", "b", "c"}, []string{"c"}},
		{"the ring turned", []string{"a", "b", "c"}, []string{"b", "c", "d"}, []string{"d"}},
		{"a line as the last", []string{"a", "a"}, []string{"a", "a", "a"}, []string{"a"}},
		{"all new", []string{"a"}, []string{"x", "y"}, []string{"x", "y"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := newLines(tc.prev, tc.cur); !slices.Equal(got, tc.want) {
				t.Errorf("newLines(%q, %q) = %q, want %q", tc.prev, tc.cur, got, tc.want)
			}
		})
	}
}

// TestFlagsAfterArguments: every command reads a flag after its arguments
// as a flag, and an argument after "--" as an argument.
func TestFlagsAfterArguments(t *testing.T) {
	var wait bool
	var n int
	fs := newFlagSet("test")
	fs.BoolVar(&wait, "wait", false, "")
	fs.IntVar(&n, "n", 0, "")
	if err := parseFlags(fs, []string{"a", "--wait", "b", "-n", "3", "--", "-c", "--wait"}, nil, ""); err != nil {
		t.Fatal(err)
	}
	if !wait || n != 3 || !slices.Equal(fs.Args(), []string{"a", "b", "-c", "--wait"}) {
		t.Errorf("wait %v, n %d, arguments %q", wait, n, fs.Args())
	}
}
