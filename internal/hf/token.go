package hf

import (
	"os"
	"path/filepath"
	"strings"
)

// ResolveToken finds the Hub token the way huggingface_hub does, so a
// machine already logged in with `hf auth login` needs no extra setting:
// the flag, else HF_TOKEN, else HUGGING_FACE_HUB_TOKEN, else the file named
// by HF_TOKEN_PATH, else $HF_HOME/token (HF_HOME defaulting to
// $XDG_CACHE_HOME/huggingface, then ~/.cache/huggingface). An empty value
// counts as unset; the answer is trimmed, and "" means anonymous.
//
// HF_TOKEN_PATH replaces the default file rather than adding to it: when it
// is set and unreadable, there is no token.
func ResolveToken(flag string, getenv func(string) string) string {
	for _, v := range []string{flag, getenv("HF_TOKEN"), getenv("HUGGING_FACE_HUB_TOKEN")} {
		if t := strings.TrimSpace(v); t != "" {
			return t
		}
	}
	file := getenv("HF_TOKEN_PATH")
	if file == "" {
		home := hfHome(getenv)
		if home == "" {
			return ""
		}
		file = filepath.Join(home, "token")
	}
	b, err := os.ReadFile(expandHome(file, getenv))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// expandHome turns a leading "~/" into $HOME, as the Python client's
// expanduser does for HF_HOME and HF_TOKEN_PATH.
func expandHome(p string, getenv func(string) string) string {
	if rest, ok := strings.CutPrefix(p, "~/"); ok && getenv("HOME") != "" {
		return filepath.Join(getenv("HOME"), rest)
	}
	return p
}
