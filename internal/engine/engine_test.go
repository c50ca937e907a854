package engine

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	tests := []struct {
		name      string
		out       string
		ok        bool
		build     int
		text, str string
	}{
		{"debian", "version: 0.7.0 (build 11669, commit Debian)\nbuilt with GNU 16.2.0 for Linux x86_64\n", true, 11669, "0.7.0 (build 11669, commit Debian)", "b11669"},
		{"upstream", "load_backend: loaded CPU backend\nversion: 6000 (3f4c2a1)\nbuilt with cc for x86_64\n", true, 6000, "6000 (3f4c2a1)", "b6000"},
		{"no build", "version: 0 (llamatest)\n", true, 0, "0 (llamatest)", "0 (llamatest)"},
		{"absurd build", "version: 99999999 (x)\n", true, 0, "99999999 (x)", "99999999 (x)"},
		{"no version line", "error: invalid argument: --version\n", false, 0, "", "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, ok := ParseVersion(tc.out)
			if ok != tc.ok || v.Build != tc.build || v.Text != tc.text || v.String() != tc.str {
				t.Errorf("ParseVersion = %+v %v (%q), want build %d text %q ok %v (%q)", v, ok, v.String(), tc.build, tc.text, tc.ok, tc.str)
			}
		})
	}
}

func TestFindPrefersTheOperatorsEngine(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("MODELSERVE_CACHE", cache)
	bin := t.TempDir()
	t.Setenv("PATH", bin)

	if _, _, err := Find(""); err != ErrNotFound {
		t.Fatalf("with nothing anywhere Find said %v, want ErrNotFound", err)
	}
	installed := filepath.Join(cache, "llama.cpp", "llama-server")
	mustExecutable(t, installed)
	if p, src, err := Find(""); err != nil || p != installed || src != Cached {
		t.Errorf("Find = %q %q %v, want the installed copy", p, src, err)
	}
	onPath := filepath.Join(bin, "llama-server")
	mustExecutable(t, onPath)
	if p, src, err := Find(""); err != nil || p != onPath || src != OnPath {
		t.Errorf("Find = %q %q %v, want the one on PATH", p, src, err)
	}
	if p, src, err := Find("/opt/mine/llama-server"); err != nil || p != "/opt/mine/llama-server" || src != Configured {
		t.Errorf("Find = %q %q %v, want the configured one, even missing", p, src, err)
	}
}

func mustExecutable(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}

// TestImageVersion reads the build a cluster's engine image runs from its
// tag, as llama.cpp's images are tagged.
func TestImageVersion(t *testing.T) {
	for image, want := range map[string]string{
		"ghcr.io/ggml-org/llama.cpp:server-b5092":      "b5092",
		"ghcr.io/ggml-org/llama.cpp:server-cuda-b6000": "b6000",
		"registry.local:5000/llama.cpp:b4500":          "b4500",
		"ghcr.io/ggml-org/llama.cpp:server":            "ghcr.io/ggml-org/llama.cpp:server",
		"ghcr.io/ggml-org/llama.cpp@sha256:0123abcd":   "ghcr.io/ggml-org/llama.cpp@sha256:0123abcd",
		"llama.cpp:server-b99999999":                   "llama.cpp:server-b99999999",
	} {
		if got := ImageVersion(image).String(); got != want {
			t.Errorf("ImageVersion(%q) = %q, want %q", image, got, want)
		}
	}
}

// TestCommandRunsTheInstalledCopyWithoutItsShell: the installed copy is
// started as its wrapper would exec it, from the exec file beside it; any
// other engine, or an exec file not as the installer writes it, is
// started as the path it is.
func TestCommandRunsTheInstalledCopyWithoutItsShell(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("MODELSERVE_CACHE", cache)
	dir := filepath.Join(cache, "llama.cpp")
	installed := filepath.Join(dir, "llama-server")
	loader := filepath.Join(dir, "root", "exe", "ld-linux-x86-64.so.2")
	server := filepath.Join(dir, "root", "usr", "bin", "llama-server")
	for _, p := range []string{installed, loader, server} {
		mustExecutable(t, p)
	}
	write := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "exec"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	alone := []string{installed}
	if got := Command(installed); !slices.Equal(got, alone) {
		t.Errorf("without exec: %q, want the wrapper %q", got, alone)
	}
	want := []string{loader, "--library-path", "/lib/a:/lib/b", server}
	write(want...)
	if got := Command(installed); !slices.Equal(got, want) {
		t.Errorf("Command = %q, want %q", got, want)
	}
	if got := Command("/opt/mine/llama-server"); !slices.Equal(got, []string{"/opt/mine/llama-server"}) {
		t.Errorf("an operator's engine is started as %q, want as its path", got)
	}
	for name, lines := range map[string][]string{
		"a loader outside the copy":  {"/bin/sh", "-c", server},
		"an engine outside the copy": {loader, "--library-path", "/lib/a", "/usr/bin/llama-server"},
		"a loader that is not there": {filepath.Join(dir, "root", "exe", "nothing"), server},
		"the loader alone":           {loader},
		"an empty argument":          {loader, "", server},
		"too long":                   {loader, strings.Repeat("x", maxExec), server},
	} {
		write(lines...)
		if got := Command(installed); !slices.Equal(got, alone) {
			t.Errorf("exec with %s: %q, want the wrapper %q", name, got, alone)
		}
	}
}

// The engine's short runs, for its version and its devices, see none of
// modelserve's secrets either: an engine is whatever program the operator
// named, and it runs them with the environment it would serve with.
func TestProbesSeeNoneOfTheServersSecrets(t *testing.T) {
	t.Setenv("HF_TOKEN", "hf_sEcReT0001")
	t.Setenv("MODELSERVE_SESSION_SECRET", "session-sEcReT-0002")
	t.Setenv("TZ", "Europe/Berlin")
	dir := t.TempDir()
	seen := filepath.Join(dir, "environ")
	script := filepath.Join(dir, "llama-server")
	body := "#!/bin/sh\nenv >> " + seen + "\n" +
		"case \"$1\" in --version) echo 'version: 0 (probe)' >&2 ;; *) echo 'Available devices:' ;; esac\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadVersion(context.Background(), script); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDevices(context.Background(), script); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(seen)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	if strings.Count(env, "TZ=Europe/Berlin") != 2 {
		t.Errorf("the two runs did not both see the time zone:\n%s", env)
	}
	for _, secret := range []string{"hf_sEcReT0001", "session-sEcReT-0002", "MODELSERVE_"} {
		if strings.Contains(env, secret) {
			t.Errorf("a probe's environment holds %s:\n%s", secret, env)
		}
	}
}
