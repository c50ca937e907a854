//go:build race

package evals

// raceEnabled is true under the race detector, which makes encoding and
// decoding a large suite an order of magnitude slower: timings are
// asserted without it.
const raceEnabled = true
