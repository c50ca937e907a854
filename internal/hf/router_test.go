package hf

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/hubtest"
)

func TestRegistriesRouteByOwner(t *testing.T) {
	ctx := context.Background()
	hub := hubtest.New(t)
	hub.AddRepo("acme/tiny-GGUF", hubtest.RepoOptions{})
	hub.AddFile("acme/tiny-GGUF", "tiny-Q4_K_M.gguf", []byte("hub bytes"))
	client, err := NewClient(Options{Endpoint: hub.URL()})
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "mine"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "mine", "mine-F16.gguf"), []byte("local bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	regs := Registries{Hub: client, Local: NewLocal(root, "")}

	tests := []struct {
		id, wantFile, wantURLPrefix string
	}{
		{"acme/tiny-GGUF", "tiny-Q4_K_M.gguf", hub.URL()},
		{"local/mine", "mine-F16.gguf", "file://"},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			repo, err := regs.Repo(ctx, tt.id, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(repo.Files) != 1 || repo.Files[0].Path != tt.wantFile {
				t.Fatalf("files %+v, want %s", repo.Files, tt.wantFile)
			}
			if u := regs.DownloadURL(tt.id, repo.Commit, tt.wantFile); !strings.HasPrefix(u, tt.wantURLPrefix) {
				t.Errorf("download URL %q, want it to start %q", u, tt.wantURLPrefix)
			}
			if err := regs.CanDownload(ctx, repo, ""); err != nil {
				t.Errorf("CanDownload: %v", err)
			}
		})
	}

	_, err = Registries{Hub: client}.Repo(ctx, "local/mine", "")
	if err == nil || !strings.Contains(err.Error(), "--models-dir") {
		t.Errorf("a local id with no folder configured: %v, want a sentence naming --models-dir", err)
	}
}
