package fleet

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"modelserve/catalog"
	"modelserve/internal/engine"
)

// engineLlamaCpp is the catalog's name for llama.cpp; a profile naming no
// engine means it too.
const engineLlamaCpp = "llamacpp"

// enginePath is the llama-server to start: the configured path, else the
// one on PATH, else the installed copy (engine.Find), looked for at each
// start so that installing it later needs no restart. Its error is the
// sentence an operator acts on.
func (b *processes) enginePath() (string, error) {
	path, _, err := engine.Find(b.opts.Engine)
	if err != nil {
		return "", fmt.Errorf("%w: llama-server is not installed on this node: install llama.cpp (its llama-server binary) "+
			"or point --llama-server (MODELSERVE_LLAMA_SERVER) at it", ErrEngineMissing)
	}
	st, err := os.Stat(path)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%w: there is no executable llama-server at %s on this node: install llama.cpp there, "+
			"or point --llama-server (MODELSERVE_LLAMA_SERVER) at its llama-server binary", ErrEngineMissing, path)
	}
	return path, nil
}

// sentenceOf is the operator's sentence of an ErrEngineMissing error,
// without the sentinel's own words in front.
func sentenceOf(err error) string {
	s := err.Error()
	if p := ErrEngineMissing.Error() + ": "; strings.HasPrefix(s, p) {
		return s[len(p):]
	}
	return s
}

// weightsFiles are the files a model's engine opens on this machine's
// mirror: its weights (the file itself, or in a directory the first of
// the catalog's Weights, else its first GGUF file but the projector) and
// its vision projector, the catalog's Projector, if it has one.
func weightsFiles(m catalog.Model) (weights, projector string, err error) {
	st, err := os.Stat(m.Source)
	if err != nil {
		return "", "", fmt.Errorf("the weights of %s are not at %s on this node: serve it again to fetch them into the mirror", m.Name, m.Source)
	}
	weights = m.Source
	if st.IsDir() {
		if weights, err = firstWeights(m); err != nil {
			return "", "", err
		}
	}
	if m.Projector == "" {
		return weights, "", nil
	}
	// The mirror keeps a repository's files under one folder, in the
	// repository's own paths: the weights' local path with their
	// repository path taken off is that folder.
	root := filepath.Dir(weights)
	if len(m.Weights) > 0 {
		if r, ok := strings.CutSuffix(filepath.ToSlash(weights), m.Weights[0]); ok {
			root = filepath.FromSlash(r)
		}
	}
	projector = filepath.Join(root, filepath.FromSlash(m.Projector))
	if _, err := os.Stat(projector); err != nil {
		return "", "", fmt.Errorf("the vision projector %s of %s is not beside its weights on this node: serve it again to fetch it into the mirror", m.Projector, m.Name)
	}
	return weights, projector, nil
}

// firstWeights is the file the engine opens in m's weights folder.
func firstWeights(m catalog.Model) (string, error) {
	if len(m.Weights) > 0 {
		return filepath.Join(m.Source, path.Base(m.Weights[0])), nil
	}
	entries, err := os.ReadDir(m.Source)
	if err != nil {
		return "", fmt.Errorf("the weights folder of %s cannot be read: %w", m.Name, err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(strings.ToLower(e.Name()), ".gguf") && e.Name() != path.Base(m.Projector) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return "", fmt.Errorf("the weights folder of %s (%s) holds no GGUF file: serve it again to fetch them into the mirror", m.Name, m.Source)
	}
	// Split files are numbered from 00001, and the engine opens the
	// first to find the rest.
	slices.Sort(names)
	return filepath.Join(m.Source, names[0]), nil
}

// weightsBytes is the size of what the engine loads: the origin's files
// when the catalog lists them, else the weights on disk.
func weightsBytes(m catalog.Model, weights string) int64 {
	var n int64
	if m.Origin != nil {
		for _, f := range m.Origin.Files {
			n += f.Bytes
		}
	}
	if n > 0 {
		return n
	}
	if st, err := os.Stat(m.Source); err == nil && st.IsDir() {
		entries, _ := os.ReadDir(m.Source)
		for _, e := range entries {
			if info, err := e.Info(); err == nil && !e.IsDir() {
				n += info.Size()
			}
		}
		return n
	}
	if st, err := os.Stat(weights); err == nil {
		return st.Size()
	}
	return 0
}

// The startup deadline: loading reads every byte of the weights, so it
// grows with them; a fixed deadline either killed large models mid-load or
// let a stuck small one hold its memory for an hour.
const (
	startupBase   = 5 * time.Minute
	startupPerGB  = 20 * time.Second
	startupCapped = time.Hour
)

// StartupTimeout is how long a replica of p, loading size bytes, may take
// to become ready: the local engine's deadline, and a pod's startup probe.
func StartupTimeout(p catalog.Profile, size int64) time.Duration {
	if p.StartupTimeout > 0 {
		return p.StartupTimeout
	}
	gb := (size + 1<<30 - 1) >> 30
	return min(startupCapped, startupBase+time.Duration(gb)*startupPerGB)
}

// EngineArgs are llama-server's arguments for a replica of m on profile
// p: written from the profile here, at the fleet's edge, and nowhere else,
// so both fleet backends start the same engine for it (the kubernetes one
// adds its address). threads is 0 to leave them to the engine. The
// engine's key is never among them: any user of the machine can read a
// process's arguments (ps), and with the key reach the engine past
// modelserve's tokens, scopes and queues. Both fleets hand it over in the
// engine's environment instead (KeyEnv), which only the engine's own user
// can read, and a pod takes from a Secret.
//
// The pool and the slots go together: llama.cpp divides --ctx-size among
// --parallel slots. Left to its default of four slots, a 32768 pool became
// slots of 8192, and requests the catalog said would fit were refused.
func EngineArgs(m catalog.Model, p catalog.Profile, weights, projector string, threads int) []string {
	var args []string
	if p.Embeddings {
		args = append(args, "--embedding")
	}
	if p.Pool > 0 {
		args = append(args, "--ctx-size", strconv.Itoa(p.Pool), "--parallel", strconv.Itoa(max(p.Slots, 1)))
		if p.Embeddings {
			// A passage is embedded in a single batch, so the batch must
			// hold a whole slot: at the default of 512, a 516-token
			// passage was refused.
			n := strconv.Itoa(p.Context())
			args = append(args, "--batch-size", n, "--ubatch-size", n)
		}
	}
	// The prompt cache as sized (none for a judge, whose prompts do not
	// come again): llama.cpp's default, up to 8 GiB, only grows, by
	// gigabytes over a day, past the memory the replica was placed by.
	args = append(args, "--cache-ram", strconv.FormatInt(p.PromptCacheBytes>>20, 10))
	args = append(args, "-m", weights)
	if projector != "" {
		args = append(args, "--mmproj", projector)
	}
	args = append(args, "--alias", m.Name, "--metrics", "--slots", "--threads-http", strconv.Itoa(httpThreads(p)))
	if threads > 0 {
		args = append(args, "--threads", strconv.Itoa(threads))
	}
	return args
}

// engineAutoSlots are the slots llama-server gives itself when it is not
// told (--parallel auto): an unsized profile's.
const engineAutoSlots = 4

// fleetReaders are the connections to an engine besides the gateway's:
// the supervisor's, which asks /health, /slots and /metrics one after the
// other on one kept-alive connection, and one more for a second reader of
// the same (a pod's probes while the supervisor reads).
const fleetReaders = 2

// httpThreads is the engine's --threads-http for profile p: a thread for
// each request the gateway may send it at once (catalog.Depth), and one
// for each of the fleet's readers. llama-server's HTTP library serves a
// kept-alive connection on one thread until it has been idle for 5 s,
// and the engine's default (max(slots+2, cores-1)) is fewer than the
// gateway's connections at full depth with the fleet's beside them: a
// build whose pool does not grow leaves the request on one connection
// more waiting for an idle one to time out.
func httpThreads(p catalog.Profile) int {
	slots := engineAutoSlots
	if p.Pool > 0 {
		slots = max(p.Slots, 1)
	}
	return catalog.Depth(slots) + fleetReaders
}

// KeyEnv is the environment variable llama-server reads its --api-key
// from.
const KeyEnv = "LLAMA_API_KEY"

// newKey is a replica's engine key: only modelserve, which hands it to its
// router and jobs, can reach the engine's port.
func newKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b)
}

// failureReason is why an engine ended, in the words of its log: llama.cpp
// writes pages of loading detail, and the line that says what went wrong is
// near the end, among its closing lines.
func failureReason(exit error, lines []string) string {
	what := "the engine exited"
	var ee *exec.ExitError
	if errors.As(exit, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			what = fmt.Sprintf("the engine was killed by signal %d (%s)", int(ws.Signal()), ws.Signal())
		} else {
			what = fmt.Sprintf("the engine exited with status %d", ee.ExitCode())
		}
	}
	if why := meaningful(lines); why != "" {
		return what + ": " + why
	}
	return what + " without saying why"
}

// meaningful picks what an engine's last lines say went wrong: llama.cpp's
// load error first, else the last lines saying error or failed, else the
// last line.
func meaningful(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		if j := strings.Index(lines[i], "error loading model"); j >= 0 {
			return strings.TrimSpace(lines[i][j:])
		}
	}
	var picked []string
	for i := len(lines) - 1; i >= 0 && len(picked) < 2; i-- {
		l := strings.TrimSpace(lines[i])
		lower := strings.ToLower(l)
		if l == "" || strings.HasPrefix(l, "modelserve:") || slices.Contains(picked, l) {
			continue
		}
		if strings.Contains(lower, "error") || strings.Contains(lower, "failed") || strings.Contains(lower, "exception") ||
			strings.Contains(lower, "out of memory") || strings.Contains(lower, "abort") {
			picked = append(picked, l)
		}
	}
	if len(picked) > 0 {
		slices.Reverse(picked)
		return strings.Join(picked, "; ")
	}
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" && !strings.HasPrefix(l, "modelserve:") {
			return l
		}
	}
	return ""
}
