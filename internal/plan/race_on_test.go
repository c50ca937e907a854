//go:build race

package plan

// raceEnabled is true under the race detector, which makes parsing headers
// an order of magnitude slower: timings are asserted without it.
const raceEnabled = true
