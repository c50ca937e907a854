package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"runtime"
	"strings"
	"testing"

	"modelserve/internal/llamatest"
)

// TestVersionNamesModelserveGoAndTheEngine: --version and the version
// command say which modelserve, which Go and which engine build, the last
// read from the engine itself.
func TestVersionNamesModelserveGoAndTheEngine(t *testing.T) {
	llama := llamatest.Path(t)
	env := func(k string) string {
		if k == "MODELSERVE_LLAMA_SERVER" {
			return llama
		}
		return ""
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, env, nil, &out, &out); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		text := out.String()
		for _, want := range []string{"modelserve ", "commit ", runtime.Version(), "llama-server b", llama} {
			if !strings.Contains(text, want) {
				t.Errorf("%v does not say %q:\n%s", args, want, text)
			}
		}
	}
	var out bytes.Buffer
	run(context.Background(), []string{"version", "--llama-server", "/nowhere/llama-server"}, env, nil, &out, &out)
	if !strings.Contains(out.String(), "/nowhere/llama-server") || !strings.Contains(out.String(), "could not be read") {
		t.Errorf("an engine that is not there:\n%s", out.String())
	}
}

// TestBadFlagIsAUsageError: a mistyped flag is an error main exits 2 for,
// printed by main alone (nothing is written before it), naming the flag
// as help writes it.
func TestBadFlagIsAUsageError(t *testing.T) {
	for _, args := range [][]string{{"--adress", "x"}, {"serve", "--log-level", "loud"}, {"token", "list", "--nope"}, {"serve", "extra"}} {
		var out bytes.Buffer
		err := run(context.Background(), args, func(string) string { return "" }, nil, &out, &out)
		var usage usageError
		if !errors.As(err, &usage) {
			t.Errorf("%v: %v, want a usage error (exit 2)", args, err)
			continue
		}
		if out.Len() != 0 {
			t.Errorf("%v printed before main does, so the error would show twice:\n%s", args, out.String())
		}
	}
	err := run(context.Background(), []string{"--adress", "x"}, func(string) string { return "" }, nil, &bytes.Buffer{}, &bytes.Buffer{})
	if !strings.Contains(err.Error(), "--adress") {
		t.Errorf("the error %q does not name --adress", err)
	}
}

// TestHelpWritesFlagsAsTheREADME: serve --help lists --flag (not -flag),
// and the Hugging Face variables read beside the flags; modelserve --help
// lists the commands instead.
func TestHelpWritesFlagsAsTheREADME(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"serve", "--help"}, func(string) string { return "" }, nil, &out, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	text := out.String()
	for _, want := range []string{"  --addr ", "  --log-format ", "  --log-level ", "HF_TOKEN_PATH", "HF_HUB_OFFLINE", "HF_HUB_CACHE"} {
		if !strings.Contains(text, want) {
			t.Errorf("--help lacks %q:\n%s", want, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "  -") && !strings.HasPrefix(line, "  --") {
			t.Errorf("a flag written with one dash: %q", line)
		}
	}
}
