package catalog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"modelserve/internal/operr"
)

// An engine setting is one environment variable a request may set for the
// engine it serves with, and the values it takes. The list is short and
// named on purpose: an engine's environment also decides which libraries
// it loads (GGML_BACKEND_PATH), which files it writes (LLAMA_ARG_LOG_FILE)
// and which tools it runs (LLAMA_ARG_TOOLS), and a prefix such as GGML_ or
// LLAMA_ARG_ admitted all of those. Everything not listed here is the
// operator's, set in a wrapper given as the engine (--llama-server): an
// engine inherits of modelserve's environment only what it needs to run
// and these settings (fleet's engineEnviron).
type engineSetting struct {
	what string
	// check says what is wrong with a value, "" when it is fine.
	check func(v string) string
}

// engineSettings are the settings a profile may carry: how an engine uses
// its cards, threads and interconnect, never what it loads, writes or
// reaches. Devices are the fleet's to choose (CUDA_VISIBLE_DEVICES), so
// none of the variables that pick or reorder them is here.
var engineSettings = map[string]engineSetting{
	"OMP_NUM_THREADS":                 {"threads OpenMP computes on", whole(1, 1024)},
	"GGML_CUDA_ENABLE_UNIFIED_MEMORY": {"lets CUDA spill into system memory", flag},
	"GGML_CUDA_NO_PINNED":             {"no pinned host memory", flag},
	"GGML_CUDA_DISABLE_GRAPHS":        {"no CUDA graphs", flag},
	"GGML_VK_DISABLE_COOPMAT":         {"no cooperative matrices on Vulkan", flag},
	"GGML_VK_PREFER_HOST_MEMORY":      {"Vulkan buffers in host memory", flag},
	"CUDA_DEVICE_MAX_CONNECTIONS":     {"CUDA work queues per card", whole(1, 32)},
	"CUDA_LAUNCH_BLOCKING":            {"synchronous CUDA launches, for debugging", flag},
	"CUDA_MODULE_LOADING":             {"when CUDA loads its kernels", oneOf("LAZY", "EAGER")},
	"NCCL_DEBUG":                      {"how much NCCL logs", oneOf("VERSION", "WARN", "INFO", "TRACE")},
	"NCCL_P2P_DISABLE":                {"no peer-to-peer transfers between cards", flag},
	"NCCL_P2P_LEVEL":                  {"how far apart cards may be for peer-to-peer", oneOf("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")},
	"NCCL_IB_DISABLE":                 {"no InfiniBand", flag},
	"NCCL_SHM_DISABLE":                {"no shared-memory transport", flag},
}

// maxSettingValue bounds what any value may be before it is looked at.
const maxSettingValue = 16

func whole(lo, hi int) func(string) string {
	return func(v string) string {
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi || strconv.Itoa(n) != v {
			return fmt.Sprintf("a whole number from %d to %d", lo, hi)
		}
		return ""
	}
}

func flag(v string) string {
	if v != "0" && v != "1" {
		return "0 or 1"
	}
	return ""
}

func oneOf(words ...string) func(string) string {
	return func(v string) string {
		if !slices.Contains(words, v) {
			return "one of " + strings.Join(words, ", ")
		}
		return ""
	}
}

// EngineSettings are the names a profile's Env may use, sorted: for a
// sentence or a form's hint.
func EngineSettings() []string {
	names := make([]string, 0, len(engineSettings))
	for k := range engineSettings {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// checkSetting says what is wrong with k=v as an engine setting, as the
// end of a sentence, or "" when it may be set.
func checkSetting(k, v string) string {
	s, ok := engineSettings[k]
	if !ok {
		return fmt.Sprintf("%s is not an engine setting a request may set: the settings are %s; anything else is the operator's, in a wrapper given as the engine (--llama-server)", operr.Quote(k), strings.Join(EngineSettings(), ", "))
	}
	if len(v) > maxSettingValue {
		return fmt.Sprintf("%s=%s is too long: %s takes %s", k, operr.Quote(v), k, s.check(""))
	}
	if want := s.check(v); want != "" {
		return fmt.Sprintf("%s takes %s (%s), not %s", k, want, s.what, operr.Quote(v))
	}
	return ""
}

// EngineEnv is a profile's Env as the engine's environment (KEY=VALUE,
// sorted), keeping only the settings the list above admits with values it
// takes: the one place both fleets turn a profile's settings into an
// environment, so an entry stored before a setting was refused still never
// reaches a process with it. dropped names what was left out.
func EngineEnv(p Profile) (env []string, dropped []string) {
	for k, v := range p.Env {
		if checkSetting(k, v) != "" {
			dropped = append(dropped, k)
			continue
		}
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	slices.Sort(dropped)
	return env, dropped
}
