package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"modelserve/internal/hf"
)

// config is what serve runs with. Each field comes from its flag, else from
// its environment variable, else the default.
type config struct {
	Addr        string
	Data        string
	HFEndpoint  string
	HFToken     string
	LlamaServer string
	ModelsDir   string
	// Architectures are extra GGUF architectures the engine build runs,
	// comma-separated, for a build newer than the embedded list.
	Architectures string
	// The console's transport and cookies (web.go).
	TLSCert, TLSKey string
	TrustProxy      string
	PublicURL       string
	SessionSecret   string
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
		{"hf-token", "HF_TOKEN", "", "Hugging Face token for gated and private repositories (also read from HUGGING_FACE_HUB_TOKEN, then $HF_HOME/token)", &c.HFToken},
		{"llama-server", "MODELSERVE_LLAMA_SERVER", "", "path to llama.cpp's llama-server; empty looks for it on PATH", &c.LlamaServer},
		{"models-dir", "MODELSERVE_MODELS_DIR", "", "folder of local model repositories, each served as local/<folder>; empty turns the local registry off", &c.ModelsDir},
		{"architectures", "MODELSERVE_ARCHITECTURES", "", "extra GGUF architectures the engine build runs, comma-separated (the embedded list is llama.cpp's of 2026)", &c.Architectures},
		{"tls-cert", "MODELSERVE_TLS_CERT", "", "PEM certificate (chain) to serve HTTPS with, beside --tls-key; session cookies are then Secure", &c.TLSCert},
		{"tls-key", "MODELSERVE_TLS_KEY", "", "PEM private key of --tls-cert", &c.TLSKey},
		{"trust-proxy", "MODELSERVE_TRUST_PROXY", "", "addresses of proxies in front (CIDR list, e.g. 127.0.0.1/32,10.0.0.0/8) whose X-Forwarded-For and X-Forwarded-Proto are believed", &c.TrustProxy},
		{"public-url", "MODELSERVE_PUBLIC_URL", "", "the console's address as users reach it; https://... marks session cookies Secure (TLS ends at a proxy)", &c.PublicURL},
		{"session-secret", "MODELSERVE_SESSION_SECRET", "", "secret (32+ characters) the session cookie keys are derived from, best given by the environment (a flag shows in process lists); empty keeps the keys in <data>/session.key", &c.SessionSecret},
	}
}

// parseServe reads serve's flags. A flag given on the command line wins over
// the environment, which wins over the default.
func parseServe(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("modelserve serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	for _, s := range c.settings() {
		fs.StringVar(s.dst, s.flag, s.def, fmt.Sprintf("%s (env %s)", s.help, s.env))
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: modelserve serve [flags]\n\nRuns the server: the console, the JSON API under /api/v1/, and the jobs.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("serve takes no arguments, only flags: %s", strings.Join(fs.Args(), " "))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, s := range c.settings() {
		if v := getenv(s.env); !set[s.flag] && v != "" {
			*s.dst = v
		}
	}
	c.HFEndpoint = strings.TrimRight(c.HFEndpoint, "/")
	// The token may also come from HUGGING_FACE_HUB_TOKEN or the token
	// file huggingface_hub writes, as every Hub tool reads it.
	c.HFToken = hf.ResolveToken(c.HFToken, getenv)
	return c, nil
}
