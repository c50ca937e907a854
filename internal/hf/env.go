package hf

import (
	"path/filepath"
	"strings"
)

// Offline reads HF_HUB_OFFLINE as huggingface_hub does: 1, true, yes or on
// (any case) turn the Hub off.
func Offline(getenv func(string) string) bool {
	switch strings.ToLower(strings.TrimSpace(getenv("HF_HUB_OFFLINE"))) {
	case "1", "true", "yes", "on":
		return true
	}
	return false
}

// HubCache is the folder huggingface_hub keeps its downloads in, where
// a file the operator fetched with another tool may already be:
// HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
// ($XDG_CACHE_HOME/huggingface/hub when that is set), as the Python client
// works it out. "" when there is no home to find it in.
func HubCache(getenv func(string) string) string {
	if c := getenv("HF_HUB_CACHE"); c != "" {
		return expandHome(c, getenv)
	}
	if c := getenv("HUGGINGFACE_HUB_CACHE"); c != "" {
		return expandHome(c, getenv) // the older name, still read
	}
	home := hfHome(getenv)
	if home == "" {
		return ""
	}
	return filepath.Join(home, "hub")
}

// hfHome is huggingface_hub's home folder: HF_HOME, else
// $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface; "" when there is
// no home to find it in. The token file and the download cache are in it.
func hfHome(getenv func(string) string) string {
	home := getenv("HF_HOME")
	if home == "" {
		cache := getenv("XDG_CACHE_HOME")
		if cache == "" {
			user := getenv("HOME")
			if user == "" {
				return ""
			}
			cache = filepath.Join(user, ".cache")
		}
		home = filepath.Join(cache, "huggingface")
	}
	return expandHome(home, getenv)
}
