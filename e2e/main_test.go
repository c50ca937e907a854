//go:build e2e

// Package e2e drives the console in a real browser against the real binary:
// what an operator does, from signing in to a serving replica, and what they
// see when a repository is gated, a download arrives damaged or the live
// connection drops.
//
// The unit tests of handlers render the pages and check their HTML; they
// cannot tell whether htmx really swaps the job's steps in as events arrive,
// whether the stream comes back after a dropped connection, or whether a
// form posts what its fields say. Here Debian's Chromium, driven by
// playwright-go, does all of it against `modelserve serve` started as a
// process, with an in-process Hub (internal/hubtest) serving tiny real
// models (internal/ggufgen) and llama.cpp's real llama-server (installed by
// make test; see internal/llamatest).
//
// The tests build with the tag e2e, so `go test ./...` leaves them out; run
// them with `make e2e` (see README.md).
package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

var (
	// binary is the modelserve executable TestMain builds.
	binary string
	// pw is the Playwright driver, shared; each test launches its own
	// browser and closes it before its server stops.
	pw *playwright.Playwright
	// artifacts is where screenshots go: e2e/artifacts, ignored by git.
	artifacts string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "e2e: "+format+"\n", args...)
		return 1
	}
	driver := os.Getenv("PLAYWRIGHT_DRIVER_PATH")
	if driver == "" {
		return fail(`PLAYWRIGHT_DRIVER_PATH is not set: run make e2e, or eval "$(./e2e/prepare.sh)" first`)
	}
	if !filepath.IsAbs(driver) {
		return fail("PLAYWRIGHT_DRIVER_PATH must be absolute, not %s", driver)
	}
	if _, err := os.Stat(chromium); err != nil {
		return fail("%s is missing: ./e2e/prepare.sh installs Debian's chromium", chromium)
	}
	var err error
	if artifacts, err = filepath.Abs("artifacts"); err != nil {
		return fail("%v", err)
	}
	if err := os.MkdirAll(artifacts, 0o755); err != nil {
		return fail("%v", err)
	}
	// A failure's screenshot from an earlier run would mislead.
	stale, _ := filepath.Glob(filepath.Join(artifacts, "*-failed.png"))
	for _, f := range stale {
		os.Remove(f)
	}

	dir, err := os.MkdirTemp("", "modelserve-e2e-bin-")
	if err != nil {
		return fail("%v", err)
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "modelserve")
	began := time.Now()
	build := exec.Command("go", "build", "-o", binary, "modelserve/cmd/modelserve")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fail("building modelserve: %v", err)
	}
	fmt.Fprintf(os.Stderr, "e2e: built modelserve in %s\n", time.Since(began).Round(time.Millisecond))

	// Run never downloads when the driver folder answers with its version;
	// Install would, and is never called.
	pw, err = playwright.Run(&playwright.RunOptions{SkipInstallBrowsers: true, Verbose: false, Stdout: os.Stderr})
	if err != nil {
		return fail("starting the Playwright driver at %s (did ./e2e/prepare.sh run?): %v", driver, err)
	}
	code := m.Run()
	if err := pw.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: stopping the Playwright driver: %v\n", err)
	}
	return code
}
