// Package engine finds the llama-server modelserve starts as replicas and
// reads which llama.cpp build it is.
//
// An operator's own llama-server always wins: the one named by
// --llama-server, else one on PATH. Without either, modelserve uses the
// build that install-llama-server.sh (beside this file) unpacks into the
// cache folder, the same one the tests run, so that `make run` on a fresh
// machine serves models end to end. Which build it is matters: it decides
// which architectures the check step accepts.
package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Installed is where install-llama-server.sh puts the engine:
// <cache>/llama.cpp/llama-server, with <cache> $MODELSERVE_CACHE, else the
// user's cache folder ($XDG_CACHE_HOME or ~/.cache) plus /modelserve. It
// says where the engine would be whether or not it is there.
func Installed() (string, error) {
	cache := os.Getenv("MODELSERVE_CACHE")
	if cache == "" {
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache folder to look for the installed engine in: %w", err)
		}
		cache = filepath.Join(dir, "modelserve")
	}
	return filepath.Join(cache, "llama.cpp", "llama-server"), nil
}

// Source says where a found engine came from, for the log.
type Source string

const (
	Configured Source = "configured"     // --llama-server
	OnPath     Source = "PATH"           // llama-server on PATH
	Cached     Source = "installed copy" // install-llama-server.sh's
)

// ErrNotFound means no engine is configured, on PATH or installed.
var ErrNotFound = errors.New("llama-server is not on PATH and not installed: run internal/engine/install-llama-server.sh (make run does), or set --llama-server")

// Find is the engine to start: configured when it is set (whether or not it
// exists: the operator's word wins, and placement says when it is missing),
// else llama-server on PATH, else the installed copy.
func Find(configured string) (string, Source, error) {
	if configured != "" {
		return configured, Configured, nil
	}
	if p, err := exec.LookPath("llama-server"); err == nil {
		return p, OnPath, nil
	}
	p, err := Installed()
	if err != nil {
		return "", "", err
	}
	if info, err := os.Stat(p); err == nil && !info.IsDir() && info.Mode()&0o111 != 0 {
		return p, Cached, nil
	}
	return "", "", ErrNotFound
}

// Command is the command line that starts the engine at path, its
// arguments to follow. For the installed copy it is the loader's command
// line that the copy's wrapper script would exec, as the installer wrote it
// beside the wrapper (exec, an argument a line): with no shell between, an
// engine starts about 5 ms sooner, at every cold start and every swap. Any
// other engine, or an installed copy whose exec is missing or not as the
// installer writes it, is started as path.
func Command(path string) []string {
	alone := []string{path}
	installed, err := Installed()
	if err != nil || path != installed {
		return alone
	}
	dir := filepath.Dir(path)
	f, err := os.Open(filepath.Join(dir, "exec"))
	if err != nil {
		return alone
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxExec+1))
	if err != nil || len(b) > maxExec {
		return alone
	}
	argv := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	// The loader first, then its arguments and the engine's path: the
	// loader and the engine are the installed copy's own files.
	if len(argv) < 2 || slices.Contains(argv, "") ||
		!strings.HasPrefix(argv[0], dir+string(filepath.Separator)) || !strings.HasPrefix(argv[len(argv)-1], dir+string(filepath.Separator)) {
		return alone
	}
	for _, file := range []string{argv[0], argv[len(argv)-1]} {
		if st, err := os.Stat(file); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			return alone
		}
	}
	return argv
}

// maxExec bounds what Command reads of exec: a few paths.
const maxExec = 16 << 10

// Version is what `llama-server --version` says of itself.
type Version struct {
	// Text is its version line without "version: ", such as
	// "0.7.0 (build 11669, commit Debian)" or "6000 (3f4c2a1)".
	Text string
	// Build is llama.cpp's build number (11669 for b11669), 0 when the
	// line names none.
	Build int
}

// String is the build as llama.cpp's releases name it ("b11669"), else the
// version text, else "unknown".
func (v Version) String() string {
	switch {
	case v.Build > 0:
		return "b" + strconv.Itoa(v.Build)
	case v.Text != "":
		return v.Text
	}
	return "unknown"
}

// imageBuild is the build an image's tag names: llama.cpp's own images
// are tagged "server-b5092", "full-cuda-b5092" and so on.
var imageBuild = regexp.MustCompile(`:(?:[a-z0-9.-]+-)?b(\d{1,7})$`)

// ImageVersion is the engine build a container image runs, as its tag says
// ("ghcr.io/ggml-org/llama.cpp:server-b5092" is b5092); an image tagged
// "server" or by digest names none, and its Version is the image alone.
func ImageVersion(image string) Version {
	v := Version{Text: image}
	if m := imageBuild.FindStringSubmatch(image); m != nil {
		v.Build, _ = strconv.Atoi(m[1])
	}
	return v
}

var (
	versionLine = regexp.MustCompile(`(?m)^version: (.+)$`)
	// Builds from llama.cpp's own tree print "version: 6000 (3f4c2a1)";
	// distributions that number releases their own way put the build
	// in the parentheses: "version: 0.7.0 (build 11669, commit Debian)".
	buildInParens = regexp.MustCompile(`\(build (\d+)\b`)
	buildFirst    = regexp.MustCompile(`^(\d+) \(`)
)

// ParseVersion reads the output of `llama-server --version`. ok is false
// when the output has no version line.
func ParseVersion(out string) (v Version, ok bool) {
	m := versionLine.FindStringSubmatch(out)
	if m == nil {
		return Version{}, false
	}
	v.Text = strings.TrimSpace(m[1])
	for _, re := range []*regexp.Regexp{buildInParens, buildFirst} {
		if b := re.FindStringSubmatch(v.Text); b != nil {
			if n, err := strconv.Atoi(b[1]); err == nil && n > 0 && n < 1_000_000 {
				v.Build = n
				break
			}
		}
	}
	return v, true
}

// ReadVersion runs `path --version` (llama-server prints it to stderr and
// exits 0) and parses what it prints.
func ReadVersion(ctx context.Context, path string) (Version, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = Environ(os.Environ())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return Version{}, fmt.Errorf("%s --version failed: %w: %s", path, err, strings.TrimSpace(lastLines(string(out), 3)))
	}
	v, ok := ParseVersion(string(out))
	if !ok {
		return Version{}, fmt.Errorf("%s --version printed no version line: %s", path, strings.TrimSpace(lastLines(string(out), 3)))
	}
	return v, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
