package fleet

import (
	"modelserve/catalog"
	"modelserve/internal/engine"
)

// An engine starts in an environment of its own, not modelserve's (see
// engine.Environ for why): of modelserve's it keeps what engine.Environ
// keeps; the fleet then adds its key, the cards it was placed on and its
// profile's checked settings (Spec.Env).

// engineEnviron is the environment of an engine started with spec, from
// modelserve's own (environ, as os.Environ): the names an engine needs to
// run (engine.Environ) and the engine settings a profile may carry, as
// the operator set them for every engine, then spec's own, which win
// where a name is in both.
func engineEnviron(environ []string, spec []string) []string {
	// exec keeps the last of a name given twice.
	return append(engine.Environ(environ, catalog.EngineSettings()...), spec...)
}
