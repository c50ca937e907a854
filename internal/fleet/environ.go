package fleet

import (
	"slices"
	"strings"

	"modelserve/catalog"
)

// An engine starts in an environment of its own, not modelserve's: modelserve's
// holds the registry's token (HF_TOKEN), the session secret, the metrics
// token and whatever else the operator gave the server, and an engine's
// environment is readable by anything running as its user
// (/proc/<pid>/environ) and is handed down to whatever the engine starts.
// From modelserve's environment an engine keeps only the names below; the
// fleet then adds its key, the cards it was placed on and its profile's
// checked settings (Spec.Env).

// engineRunNames are the variables an engine needs from modelserve's
// environment to run as the operator set the machine up. Named, never a
// prefix: GGML_, LLAMA_ARG_ and HF_ each hold a token or a path that
// loads code (LLAMA_ARG_HF_TOKEN, GGML_BACKEND_PATH).
var engineRunNames = []string{
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
	// path on its command line (engine.Command), which takes the place of
	// this variable.
	"LD_LIBRARY_PATH",
	// Which cards the operator leaves to modelserve, and how their
	// drivers find and number them. On a replica placed on cards the
	// fleet sets its own (startLocked), which win.
	"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
	"GPU_DEVICE_ORDINAL", "HSA_OVERRIDE_GFX_VERSION", "GGML_VK_VISIBLE_DEVICES",
	"ONEAPI_DEVICE_SELECTOR", "VK_ICD_FILENAMES", "VK_DRIVER_FILES",
}

// engineEnviron is the environment of an engine started with spec, from
// modelserve's own (environ, as os.Environ): the names an engine needs to
// run (engineRunNames) and the engine settings a profile may carry, as
// the operator set them for every engine, then spec's own, which win
// where a name is in both.
func engineEnviron(environ []string, spec []string) []string {
	keep := slices.Concat(engineRunNames, catalog.EngineSettings())
	var env []string
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if ok && slices.Contains(keep, k) {
			env = append(env, kv)
		}
	}
	// exec keeps the last of a name given twice.
	return append(env, spec...)
}
