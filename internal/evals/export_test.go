package evals

// Compilations is how many suites r has compiled, put or run: a read of a
// suite to show it compiles none.
func Compilations(r *Runner) int64 { return r.suites.compiles.Load() }

// RaceEnabled is raceEnabled, for the tests outside the package.
const RaceEnabled = raceEnabled
