package engine

import (
	"slices"
	"strings"
)

// An engine runs in an environment of its own, not modelserve's, whether
// it serves or only says its version or its devices: modelserve's holds
// the registry's token (HF_TOKEN), the session secret, the metrics token
// and whatever else the operator gave the server, and a process's
// environment is readable by anything running as its user
// (/proc/<pid>/environ) and is handed down to whatever it starts.

// runNames are the variables an engine needs from modelserve's
// environment to run as the operator set the machine up. Named, never a
// prefix: GGML_, LLAMA_ARG_ and HF_ each hold a token or a path that
// loads code (LLAMA_ARG_HF_TOKEN, GGML_BACKEND_PATH).
var runNames = []string{
	// Where programs are: vLLM starts compilers and its own workers.
	"PATH",
	// Whose caches: vLLM, torch and Triton keep compiled kernels under
	// the home folder or the XDG cache, and write scratch files to TMPDIR.
	"HOME", "USER", "LOGNAME", "XDG_CACHE_HOME", "TMPDIR",
	// How text, numbers and times read in the engine's log.
	"LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_NUMERIC", "LC_TIME", "LC_COLLATE",
	"LC_MONETARY", "LC_MESSAGES", "TZ",
	// Where an operator's own engine finds the card's libraries (a CUDA
	// toolkit outside the loader's path, a Python environment's). The
	// installed copy does not need it: its loader is given its library
	// path on its command line (Command), which takes the place of
	// this variable.
	"LD_LIBRARY_PATH",
	// Which cards the operator leaves to modelserve, and how their
	// drivers find and number them. On a replica placed on cards the
	// fleet sets its own (the fleet's startLocked), which win.
	"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
	"GPU_DEVICE_ORDINAL", "HSA_OVERRIDE_GFX_VERSION", "GGML_VK_VISIBLE_DEVICES",
	"ONEAPI_DEVICE_SELECTOR", "VK_ICD_FILENAMES", "VK_DRIVER_FILES",
}

// Environ is what an engine keeps of modelserve's environment (environ,
// as os.Environ): the names it needs to run (runNames) and the names in
// also (the engine settings an operator may set for every engine).
func Environ(environ []string, also ...string) []string {
	var env []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if ok && (slices.Contains(runNames, k) || slices.Contains(also, k)) {
			env = append(env, kv)
		}
	}
	return env
}
