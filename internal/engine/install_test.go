package engine_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"modelserve/internal/llamatest"
)

// The installer's choice of packages, asked of the script itself in its
// dry run: nothing is fetched, so the CUDA packages (hundreds of MB) are
// never downloaded on a machine that has no card to run them.

const (
	enginePackages = "engine: llama.cpp-tools libllama0 libggml0 libc6 libstdc++6 libgcc-s1 libgomp1 libssl3t64 libzstd1 zlib1g"
	cudaPackages   = "cuda: libggml0-backend-cuda libcublas12 libcublaslt12 libcudart12"
	vulkanPackages = "vulkan: libggml0-backend-vulkan libvulkan1"
)

func TestTheInstallerFetchesAGPUBackendWhereThereAreCards(t *testing.T) {
	if _, err := exec.LookPath("nvidia-smi"); err == nil {
		t.Skip("this machine has an nvidia-smi of its own, which the cases without cards would find")
	}
	const lists = "#!/bin/sh\necho 'GPU 0: NVIDIA L4 (UUID: GPU-5d3c)'\necho 'GPU 1: NVIDIA L4 (UUID: GPU-77a1)'\n"
	const fails = "#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.'\nexit 9\n"
	tests := []struct {
		name string
		smi  string // the stand-in nvidia-smi; "" for none
		// installed: a working engine already in the cache, and whether
		// it was installed with its backend tried; oldLayout, one
		// installed before the engine ran from exe/ with the CPU
		// backends chosen for the machine; noExec, one installed before
		// the installer wrote the command line modelserve starts it
		// with (exec).
		installed, backend, oldLayout, noExec bool
		want                                  []string
	}{
		{name: "no cards", want: []string{enginePackages}},
		{name: "two cards", smi: lists, want: []string{enginePackages, cudaPackages, vulkanPackages}},
		{name: "a driver that does not answer", smi: fails, want: []string{enginePackages}},
		{name: "installed, no cards", installed: true, want: []string{"ready"}},
		{name: "installed before the cards", smi: lists, installed: true, want: []string{enginePackages, cudaPackages, vulkanPackages}},
		{name: "installed with its backend", smi: lists, installed: true, backend: true, want: []string{"ready"}},
		{name: "installed in the layout before exe/", installed: true, oldLayout: true, want: []string{enginePackages}},
		{name: "installed before exec", installed: true, noExec: true, want: []string{enginePackages}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cache, bin := t.TempDir(), t.TempDir()
			if tt.smi != "" {
				if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(tt.smi), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if tt.installed {
				dir := filepath.Join(cache, "llama.cpp")
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(llamatest.Path(t), filepath.Join(dir, "llama-server")); err != nil {
					t.Fatal(err)
				}
				if !tt.oldLayout {
					if err := os.MkdirAll(filepath.Join(dir, "root", "exe"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				if !tt.oldLayout && !tt.noExec {
					if err := os.WriteFile(filepath.Join(dir, "exec"), []byte("see TestTheInstalledCopyStartsWithoutItsShell\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
				if tt.backend {
					if err := os.WriteFile(filepath.Join(dir, "BACKEND"), []byte("cuda\n"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			cmd := exec.Command("bash", "install-llama-server.sh")
			cmd.Env = append(os.Environ(), "MODELSERVE_CACHE="+cache, "MODELSERVE_INSTALL_DRY_RUN=1",
				"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("the dry run failed: %v\n%s", err, out)
			}
			got := strings.Split(strings.TrimSpace(string(out)), "\n")
			if tt.want[0] == "ready" {
				if want := "ready: " + filepath.Join(cache, "llama.cpp", "llama-server"); len(got) != 1 || got[0] != want {
					t.Errorf("the dry run says %q, want %q", got, want)
				}
				return
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("the dry run would fetch\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
