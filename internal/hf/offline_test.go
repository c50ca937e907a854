package hf_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/operr"
)

// TestOfflineRefusesTheHubAndKeepsLocalFolders: with HF_HUB_OFFLINE, a Hub
// repository is refused at once in a sentence that says why and what to
// do, the Hub sees no request at all, and a local folder still serves.
func TestOfflineRefusesTheHubAndKeepsLocalFolders(t *testing.T) {
	hub := hubtest.New(t)
	hub.AddRepo("acme/tiny-GGUF", hubtest.RepoOptions{})
	hub.AddFile("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", []byte("GGUF weights"))
	if !hf.Offline(func(k string) string { return map[string]string{"HF_HUB_OFFLINE": "1"}[k] }) {
		t.Fatal("HF_HUB_OFFLINE=1 does not read as offline")
	}
	client, err := hf.NewClient(hf.Options{Endpoint: hub.URL(), Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	models := t.TempDir()
	if err := os.MkdirAll(filepath.Join(models, "tiny"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(models, "tiny", "tiny-Q8_0.gguf"), []byte("GGUF local weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	regs := hf.Registries{Hub: client, Local: hf.NewLocal(models, filepath.Join(t.TempDir(), "hashes.json"))}
	ctx := context.Background()

	_, err = regs.Repo(ctx, "acme/tiny-GGUF", "main")
	e, ok := operr.As(err)
	if !ok || e.Kind != operr.Unavailable || !errors.Is(err, hf.ErrOffline) {
		t.Fatalf("reading a Hub repository offline: %v, want an Unavailable sentence", err)
	}
	msg, _ := operr.Sentence(err)
	for _, want := range []string{"acme/tiny-GGUF", "HF_HUB_OFFLINE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the sentence %q does not name %s", msg, want)
		}
	}
	if _, err := client.Open(ctx, client.DownloadURL("acme/tiny-GGUF", "main", "tiny-Q4_K_M.gguf"), 0, 0); !errors.Is(err, hf.ErrOffline) {
		t.Errorf("opening a Hub file offline: %v", err)
	}
	if n := len(hub.Log()); n != 0 {
		t.Errorf("the Hub was asked %d times while offline: %+v", n, hub.Log())
	}

	repo, err := regs.Repo(ctx, "local/tiny", "")
	if err != nil {
		t.Fatalf("a local folder offline: %v", err)
	}
	if len(repo.Files) != 1 || repo.Files[0].Path != "tiny-Q8_0.gguf" {
		t.Errorf("the local folder lists %+v", repo.Files)
	}
}

func TestHubCacheFollowsHuggingFaceHub(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"HF_HUB_CACHE wins", map[string]string{"HF_HUB_CACHE": "/c", "HF_HOME": "/h", "HOME": "/home/a"}, "/c"},
		{"under HF_HOME", map[string]string{"HF_HOME": "/h", "HOME": "/home/a"}, "/h/hub"},
		{"under XDG_CACHE_HOME", map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/home/a"}, "/x/huggingface/hub"},
		{"the default", map[string]string{"HOME": "/home/a"}, "/home/a/.cache/huggingface/hub"},
		{"a ~ in HF_HOME", map[string]string{"HF_HOME": "~/hf", "HOME": "/home/a"}, "/home/a/hf/hub"},
		{"no home at all", map[string]string{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := hf.HubCache(func(k string) string { return c.env[k] }); got != c.want {
				t.Errorf("HubCache = %q, want %q", got, c.want)
			}
		})
	}
}
