package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"modelserve/internal/canary"
	"modelserve/internal/fleet"
	"modelserve/internal/hf"
	"modelserve/internal/notify"
	"modelserve/internal/operr"
	"modelserve/internal/trace"
	"modelserve/internal/updates"
)

// config is what serve runs with. Each field comes from its flag, else from
// its environment variable, else the default.
type config struct {
	Addr        string
	Data        string
	HFEndpoint  string
	HFToken     string
	LlamaServer string
	VLLM        string
	ModelsDir   string
	// Architectures are extra GGUF architectures the engine build runs,
	// comma-separated, for a build newer than the embedded list.
	Architectures string
	// The console's transport and cookies (web.go).
	TLSCert, TLSKey string
	TrustProxy      string
	PublicURL       string
	SessionSecret   string
	// NotifyURL, when set, is the webhook told of updates noticed,
	// promoted and rolled back, models parked and jobs failed.
	NotifyURL string
	// MetricsToken, when set, is what a scraper must present to read
	// /metrics, which is otherwise open.
	MetricsToken string
	// How the log is written: text or json, and from which level.
	LogFormat, LogLevel string
	// HFOffline (HF_HUB_OFFLINE) asks nothing of the Hub; HFHubCache is
	// the operator's Hugging Face cache, files already there are taken
	// from rather than fetched (environment only, as huggingface_hub
	// reads them).
	HFOffline  bool
	HFHubCache string
	// UpdateEvery is --update-interval as given, and UpdateInterval what
	// it reads as: the time between two checks of a served model's branch
	// for new weights (0: never, unless a model has its own).
	UpdateEvery    string
	UpdateInterval time.Duration
	// DownloadRateText is --download-rate as given, and DownloadRate what
	// it reads as: bytes a second for all the mirror's fetches (0: no cap).
	DownloadRateText string
	DownloadRate     int64
	// LocalMemoryText is --local-memory as given, and LocalMemory what it
	// reads as: the bytes the local fleet may promise its replicas on this
	// machine (0: what the machine has).
	LocalMemoryText string
	LocalMemory     int64
	// HeadroomText is --headroom as given, and Headroom what it reads as:
	// the bytes kept free of each device (a node's RAM, each card) for the
	// system and other programs, never promised to a replica.
	HeadroomText string
	Headroom     int64
	// DrainTimeoutText is --drain-timeout as given, and DrainTimeout what
	// it reads as: the longest either fleet lets a replica it retires
	// finish the answers it is writing.
	DrainTimeoutText string
	DrainTimeout     time.Duration
	// ResidencyText is --residency as given, and Residency what it reads
	// as: the least a replica that was used stays before it is given back
	// for another model on demand; 0 keeps none.
	ResidencyText string
	Residency     time.Duration
	// How an update's canary is tried (canary-*), as given and as read:
	// the share of its model's requests it takes, and the requests and
	// time its trial is bounded by.
	CanaryShareText, CanaryRequestsText, CanaryWindowText string
	CanaryShare                                           float64
	CanaryPolicy                                          canary.Policy
	// Where replicas run (backend.go): this machine's processes, or a
	// Kubernetes cluster and how its pods are made.
	Fleet, Kubeconfig, Namespace            string
	EngineImage, FetchImage, WeightsVolume  string
	VLLMImage                               string
	MirrorURL, MirrorToken, GPUProductLabel string
	// TraceURL is --trace-url: a template with {trace_id}.
	TraceURL string
	// TraceContentText is --trace-content as given, and TraceContent
	// what it reads as.
	TraceContentText string
	TraceContent     bool
	// StopEnginesOnExit has the local engines end with modelserve rather
	// than be adopted by the next one on the same data folder.
	StopEnginesOnExit bool
	// OTel is the OTEL_* variables tracing is set up from
	// (internal/trace).
	OTel trace.Env
	// Upgrade is --upgrade: ask the modelserve serving Data to hand its
	// port to the binary on disk (handover.go), rather than serve.
	Upgrade bool
	// HandOver asks serve to hand its port to a new process (SIGHUP);
	// nil for a server a test runs in its own process.
	HandOver <-chan os.Signal
}

// setting ties a flag to its environment variable, so both are documented
// together and read in one place.
type setting struct {
	flag, env, def, help string
	dst                  *string
}

func (c *config) settings() []setting {
	return []setting{
		{"addr", "MODELSERVE_ADDR", "127.0.0.1:8080", "address to listen on, host:port", &c.Addr},
		{"data", "MODELSERVE_DATA", "./data", "data directory: the SQLite database and the mirror of model files; created if missing", &c.Data},
		{"hf-endpoint", "HF_ENDPOINT", "https://huggingface.co", "Hugging Face Hub endpoint (a Hub-compatible server works too)", &c.HFEndpoint},
		{"hf-token", "HF_TOKEN", "", "Hugging Face token for gated and private repositories (also read from HUGGING_FACE_HUB_TOKEN, then the file HF_TOKEN_PATH names, then $HF_HOME/token)", &c.HFToken},
		{"llama-server", "MODELSERVE_LLAMA_SERVER", "", "path to llama.cpp's llama-server; empty looks for it on PATH", &c.LlamaServer},
		{"vllm", "MODELSERVE_VLLM", "", "vLLM's vllm program, which the local fleet runs original (safetensors) weights with on this machine's cards; empty looks for vllm on PATH", &c.VLLM},
		{"models-dir", "MODELSERVE_MODELS_DIR", "", "folder of local model repositories, each served as local/<folder>; empty turns the local registry off", &c.ModelsDir},
		{"architectures", "MODELSERVE_ARCHITECTURES", "", "extra GGUF architectures the engine build runs, comma-separated (the embedded list is llama.cpp's of 2026)", &c.Architectures},
		{"tls-cert", "MODELSERVE_TLS_CERT", "", "PEM certificate (chain) to serve HTTPS with, beside --tls-key; session cookies are then Secure", &c.TLSCert},
		{"tls-key", "MODELSERVE_TLS_KEY", "", "PEM private key of --tls-cert", &c.TLSKey},
		{"trust-proxy", "MODELSERVE_TRUST_PROXY", "", "addresses of proxies in front (CIDR list, e.g. 127.0.0.1/32,10.0.0.0/8) whose X-Forwarded-For and X-Forwarded-Proto are believed", &c.TrustProxy},
		{"public-url", "MODELSERVE_PUBLIC_URL", "", "the console's address as users reach it; https://... marks session cookies Secure (TLS ends at a proxy)", &c.PublicURL},
		{"log-format", "MODELSERVE_LOG_FORMAT", "text", "how the log is written: text (key=value lines) or json (one object a line)", &c.LogFormat},
		{"log-level", "MODELSERVE_LOG_LEVEL", "info", "the least level logged: debug, info, warn or error", &c.LogLevel},
		{"update-interval", "MODELSERVE_UPDATE_INTERVAL", "6h", "how often each served model's branch is checked for new weights (6h, 30m; 0 for never); a model may have its own (PUT /api/v1/catalog/{name}/updates)", &c.UpdateEvery},
		{"download-rate", "MODELSERVE_DOWNLOAD_RATE", "", "the most the mirror fetches from registries a second, all fetches together (50MB, 1.5GB, 800KB); empty for no cap", &c.DownloadRateText},
		{"local-memory", "MODELSERVE_LOCAL_MEMORY", "", "the memory the local fleet may promise its replicas on this machine (12GiB, 350MB, or bytes): the node's memory as the planner, the serve form and placement see it; empty for what the machine has", &c.LocalMemoryText},
		{"headroom", "MODELSERVE_HEADROOM", "", "memory kept free on each device (a node's RAM, each GPU) for the system and other programs, never promised to a replica (1GiB, 512MiB, 0 for none); empty for 1GiB, or none beside --local-memory, which is the operator's margin already", &c.HeadroomText},
		{"drain-timeout", "MODELSERVE_DRAIN_TIMEOUT", "10m", "the longest a replica being retired (scaled down, idle, given back for another model, stopped or restarted) waits for the answers it is writing to end before it is stopped anyway", &c.DrainTimeoutText},
		{"residency", "MODELSERVE_RESIDENCY", "5s", "the least a model loaded on demand and used stays before another model on demand takes its room (it stays ten of its loads when that is more), so two models asked for in turn do not swap at every request; the other waits, or is answered 429 with Retry-After past its queue; 0 turns it off", &c.ResidencyText},
		{"canary-share", "MODELSERVE_CANARY_SHARE", "0.1", "the share of a model's requests an update's canary takes while it is judged (0.1 is 10%); an update may give its own", &c.CanaryShareText},
		{"canary-requests", "MODELSERVE_CANARY_REQUESTS", "50", "how many requests a canary serves before it is judged on them", &c.CanaryRequestsText},
		{"canary-window", "MODELSERVE_CANARY_WINDOW", "30m", "the longest a canary is tried before it is judged on what it served", &c.CanaryWindowText},
		{"session-secret", "MODELSERVE_SESSION_SECRET", "", "secret (32+ characters) the session cookie keys are derived from, best given by the environment (a flag shows in process lists); empty keeps the keys in <data>/session.key", &c.SessionSecret},
		{"notify-url", "MODELSERVE_NOTIFY_URL", "", "a webhook told, by a JSON POST with a text field (chat webhooks show it), of new weights noticed, updates promoted and rolled back, models parked and jobs failed; empty tells no one", &c.NotifyURL},
		{"metrics-token", "MODELSERVE_METRICS_TOKEN", "", "a bearer token /metrics asks of a scraper (Authorization: Bearer ...), best given by the environment; empty leaves /metrics open, as scrapers expect", &c.MetricsToken},
		{"fleet", "MODELSERVE_FLEET", "", "where replicas run: local (engine processes on this machine; empty means local) or kubernetes (Deployments in a cluster)", &c.Fleet},
		{"kubeconfig", "KUBECONFIG", "", "kubeconfig file for --fleet kubernetes; empty uses the in-cluster service account", &c.Kubeconfig},
		{"namespace", "MODELSERVE_NAMESPACE", "", "namespace the kubernetes fleet's objects live in; empty means modelserve", &c.Namespace},
		{"engine-image", "MODELSERVE_ENGINE_IMAGE", "", "llama.cpp server image the kubernetes fleet's pods run (its entrypoint llama-server), e.g. ghcr.io/ggml-org/llama.cpp:server; required with --fleet kubernetes", &c.EngineImage},
		{"vllm-image", "MODELSERVE_VLLM_IMAGE", "", "vLLM's OpenAI server image the kubernetes fleet runs original (safetensors) weights with, e.g. vllm/vllm-openai:v0.11.0 (its tag's release decides the model classes accepted); empty serves GGUF files only", &c.VLLMImage},
		{"fetch-image", "MODELSERVE_FETCH_IMAGE", "", "image of the init container that fetches weights from the mirror (busybox sh, wget, sha256sum); empty means busybox:1.37", &c.FetchImage},
		{"weights-volume", "MODELSERVE_WEIGHTS_VOLUME", "", "where pods keep weights: empty for an emptyDir, pvc:<claim> or hostPath:<folder> to keep them across pods", &c.WeightsVolume},
		{"mirror-url", "MODELSERVE_MIRROR_URL", "", "modelserve's address as the cluster's nodes reach it, to fetch weights from /mirror/; empty uses --public-url", &c.MirrorURL},
		{"mirror-token", "MODELSERVE_MIRROR_TOKEN", "", "API token (modelserve token create) the nodes fetch weights with, written to the Secret modelserve-mirror; empty leaves that Secret to the operator", &c.MirrorToken},
		{"trace-url", "MODELSERVE_TRACE_URL", "", "where a trace viewer shows a trace, with {trace_id} (e.g. http://jaeger:16686/trace/{trace_id}): the job page links each job's trace there", &c.TraceURL},
		{"trace-content", "MODELSERVE_TRACE_CONTENT", "", "true records the gateway's prompts and answers (up to 16 KiB each) on their traces, and the smoke test's answer on its job's; off by default, as they may hold what should not leave", &c.TraceContentText},
		{"gpu-product-label", "MODELSERVE_GPU_PRODUCT_LABEL", "", "node label naming a node's card, which GPU profiles are placed by; empty means nvidia.com/gpu.product", &c.GPUProductLabel},
	}
}

// parseServe reads serve's flags. A flag given on the command line wins over
// the environment, which wins over the default.
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := newFlagSet("modelserve serve")
	for _, s := range c.settings() {
		fs.StringVar(s.dst, s.flag, s.def, fmt.Sprintf("%s (env %s)", s.help, s.env))
	}
	fs.BoolVar(&c.StopEnginesOnExit, "stop-engines-on-exit", false, "stop the local engines when modelserve exits; by default they keep running, "+
		"and the next modelserve on the same data folder adopts them without loading their models again (env MODELSERVE_STOP_ENGINES_ON_EXIT)")
	fs.BoolVar(&c.Upgrade, "upgrade", false, "hand the port of the modelserve serving --data to the binary on disk (as SIGHUP does): no request is refused, and this prints how it ended")
	if err := parseFlags(fs, args, stderr, serveUsage); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, usageError{fmt.Errorf("serve takes no arguments, only flags: %s", strings.Join(fs.Args(), " "))}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range c.settings() {
		if v := getenv(s.env); !set[s.flag] && v != "" {
			*s.dst = v
		}
	}
	c.HFEndpoint = strings.TrimRight(c.HFEndpoint, "/")
	c.OTel = trace.ReadEnv(getenv)
	// The token may also come from HUGGING_FACE_HUB_TOKEN or the token
	// file huggingface_hub writes, as every Hub tool reads it.
	c.HFToken = hf.ResolveToken(c.HFToken, getenv)
	c.HFOffline, c.HFHubCache = hf.Offline(getenv), hf.HubCache(getenv)
	d, err := updates.ParseInterval(strings.TrimSpace(c.UpdateEvery))
	if err != nil {
		msg, _ := operr.Sentence(err)
		return c, usageError{fmt.Errorf("--update-interval: %s", msg)}
	}
	c.UpdateInterval = d
	if c.DownloadRate, err = parseRate(c.DownloadRateText); err != nil {
		return c, usageError{err}
	}
	if c.LocalMemory, err = parseSize(c.LocalMemoryText, 1<<20, 1<<50); err != nil {
		return c, usageError{fmt.Errorf("--local-memory is the memory the local fleet may promise, from 1MiB to 1PiB, like 12GiB or 350MB (empty for what the machine has), not %s", operr.Quote(c.LocalMemoryText))}
	}
	if c.Headroom, err = parseSize(c.HeadroomText, 0, 1<<40); err != nil {
		return c, usageError{fmt.Errorf("--headroom is the memory kept free on each device, from 0 to 1TiB, like 1GiB or 512MiB, not %s", operr.Quote(c.HeadroomText))}
	}
	if strings.TrimSpace(c.HeadroomText) == "" && c.LocalMemory == 0 {
		c.Headroom = fleet.DefaultHeadroom
	}
	if c.DrainTimeout, err = time.ParseDuration(strings.TrimSpace(c.DrainTimeoutText)); err != nil || c.DrainTimeout < time.Second || c.DrainTimeout > 24*time.Hour {
		return c, usageError{fmt.Errorf("--drain-timeout is a duration from 1s to 24h (10m, 1h), the longest an answer may take, not %s", operr.Quote(c.DrainTimeoutText))}
	}
	if c.Residency, err = time.ParseDuration(strings.TrimSpace(c.ResidencyText)); err != nil || c.Residency < 0 || c.Residency > time.Hour {
		return c, usageError{fmt.Errorf("--residency is a duration from 0 to 1h (5s, 1m; 0 for none), the least a model loaded on demand stays once used, not %s", operr.Quote(c.ResidencyText))}
	}
	if t := strings.TrimSpace(c.TraceURL); t != "" {
		if u, err := url.Parse(t); err != nil || (u.Scheme != "http" && u.Scheme != "https") || !strings.Contains(t, "{trace_id}") {
			return c, usageError{fmt.Errorf("--trace-url is an http:// or https:// address with {trace_id} in it, like http://jaeger:16686/trace/{trace_id}, not %q", t)}
		}
		c.TraceURL = t
	}
	if v := strings.TrimSpace(getenv("MODELSERVE_STOP_ENGINES_ON_EXIT")); v != "" && !set["stop-engines-on-exit"] {
		if c.StopEnginesOnExit, err = strconv.ParseBool(v); err != nil {
			return c, usageError{fmt.Errorf("MODELSERVE_STOP_ENGINES_ON_EXIT is true or false, not %q", v)}
		}
	}
	if t := strings.TrimSpace(c.TraceContentText); t == "" {
		c.TraceContent = false
	} else if c.TraceContent, err = strconv.ParseBool(t); err != nil {
		return c, usageError{fmt.Errorf("--trace-content is true or false, not %q", c.TraceContentText)}
	}
	if err := c.readCanary(); err != nil {
		return c, usageError{err}
	}
	if c.NotifyURL != "" {
		if err := notify.CheckURL(c.NotifyURL); err != nil {
			return c, usageError{err}
		}
	}
	return c, nil
}

// parseRate reads --download-rate: bytes a second (parseSize), "" for no
// cap.
func parseRate(s string) (int64, error) {
	n, err := parseSize(s, 1024, 1e12)
	if err != nil {
		return 0, fmt.Errorf("--download-rate is bytes a second from 1KiB to 1TB, like 50MB or 1.5GB (empty for no cap), not %q", strings.TrimSpace(s))
	}
	return n, nil
}

// parseSize reads a number of bytes with a unit (B, KB, MB, GB, TB as
// powers of 1000; KiB, MiB, GiB, TiB of 1024), from lo to hi; "" is 0.
func parseSize(s string, lo, hi float64) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, nil
	}
	if len(s) > 40 {
		return 0, errors.New("too long for a size")
	}
	num := strings.TrimRight(s, "BKMGTikmgti ")
	unit := strings.ToUpper(strings.TrimSpace(s[len(num):]))
	mult := map[string]float64{"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9, "T": 1e12, "TB": 1e12,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "TIB": 1 << 40}[unit]
	n, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || mult == 0 || math.IsNaN(n) || n*mult < lo || n*mult > hi {
		return 0, fmt.Errorf("not a size from %.0f to %.0f bytes", lo, hi)
	}
	return int64(n * mult), nil
}

// readCanary reads the canary-* settings, each bounded.
func (c *config) readCanary() error {
	share, err := strconv.ParseFloat(strings.TrimSpace(c.CanaryShareText), 64)
	if err != nil || share <= 0 || share > 1 {
		return fmt.Errorf("--canary-share is a share of the requests above 0 and at most 1 (0.1 is 10%%), not %q", c.CanaryShareText)
	}
	n, err := strconv.Atoi(strings.TrimSpace(c.CanaryRequestsText))
	if err != nil || n < 1 || n > 1_000_000 {
		return fmt.Errorf("--canary-requests is a count from 1 to 1000000, not %q", c.CanaryRequestsText)
	}
	window, err := time.ParseDuration(strings.TrimSpace(c.CanaryWindowText))
	if err != nil || window < time.Second || window > 7*24*time.Hour {
		return fmt.Errorf("--canary-window is a duration from 1s to 168h (30m, 2h), not %q", c.CanaryWindowText)
	}
	c.CanaryShare, c.CanaryPolicy = share, canary.DefaultPolicy
	c.CanaryPolicy.MinRequests, c.CanaryPolicy.Window = n, window
	return nil
}

const serveUsage = `Usage: modelserve serve [flags]

Runs the server: the console, the JSON API under /api/v1/, and the jobs.

Environment read beside the flags, as huggingface_hub reads it:
  HF_TOKEN_PATH   file holding the Hub token, instead of $HF_HOME/token
  HF_HOME         huggingface_hub's folder (default ~/.cache/huggingface)
  HF_HUB_CACHE    its download cache (default $HF_HOME/hub): a file already there
                  with the published sha256 is linked or copied into the mirror
                  rather than downloaded again
  HF_HUB_OFFLINE  1 asks nothing of the Hub: the mirror and --models-dir serve,
                  and a job that needs the Hub says so
`
