package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"modelserve/internal/engine"
)

// buildInfo is what the binary knows of how it was built: its module
// version and the commit of the tree it was built from, as the go command
// records them (go build stamps vcs.* settings in a git checkout).
type buildInfo struct {
	Version, Commit, Time string
	Modified              bool
	Go                    string
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(devel)", Go: runtime.Version()}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if v := info.Main.Version; v != "" {
		b.Version = v
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	return b
}

// versionCmd prints modelserve's version and commit, Go's, and the engine
// build serve would start replicas with: the three things a bug report
// needs, and the third is the one that decides which models load.
// --llama-server (else MODELSERVE_LLAMA_SERVER) names the engine as serve's
// flag does.
func versionCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("modelserve version")
	llama := fs.String("llama-server", getenv("MODELSERVE_LLAMA_SERVER"), "path to llama.cpp's llama-server; empty looks for it as serve does (env MODELSERVE_LLAMA_SERVER)")
	if err := parseFlags(fs, args, stdout, "Usage: modelserve version [flags]\n\nPrints modelserve's version and commit, Go's, and the engine build it finds.\n"); err != nil {
		return err
	}
	b := readBuildInfo()
	commit := "unknown (built outside a git checkout)"
	if b.Commit != "" {
		commit = b.Commit
		if b.Modified {
			commit += " with uncommitted changes"
		}
		if b.Time != "" {
			commit += ", " + b.Time
		}
	}
	fmt.Fprintf(stdout, "modelserve %s\ncommit     %s\ngo         %s %s/%s\n", b.Version, commit, b.Go, runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(stdout, "engine     %s\n", engineLine(ctx, *llama))
	return nil
}

// engineLine says which llama-server serve would use and its build, or
// why there is none, in a line.
func engineLine(ctx context.Context, configured string) string {
	path, source, err := engine.Find(configured)
	if err != nil {
		return "none: " + err.Error()
	}
	v, err := engine.ReadVersion(ctx, path)
	if err != nil {
		return fmt.Sprintf("%s (%s), whose version could not be read: %v", path, source, err)
	}
	return fmt.Sprintf("llama-server %s (%s) at %s (%s)", v, v.Text, path, source)
}
