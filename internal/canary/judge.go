// Package canary judges a new version of a model served beside the current
// one on a share of its traffic: from what each version's requests did
// over a window bounded in count and in time, and from the eval suite's
// pass rate on each, it says whether to promote the new version, roll it
// back, or wait for more. It holds no state and does no I/O: the update
// job measures, asks, and acts on the verdict.
package canary

import (
	"fmt"
	"time"

	"modelserve/internal/words"
)

// Arm is what one version's requests did over the window.
type Arm struct {
	// Requests ended, Failed of them (5xx, refused for want of room, or
	// not answered at all), Answered by a replica.
	Requests, Failed, Answered int
	// TTFT is the median time to the first token of the answered ones,
	// TokensPerSecond their generation speed; 0 when none says.
	TTFT            time.Duration
	TokensPerSecond float64
}

// ErrorRate is the part of the requests that failed, 0 with none.
func (a Arm) ErrorRate() float64 {
	if a.Requests == 0 {
		return 0
	}
	return float64(a.Failed) / float64(a.Requests)
}

// Policy is how a canary is judged.
type Policy struct {
	// MinRequests the canary must have served for a verdict on its
	// traffic, within Window; when the window ends with fewer, it is
	// judged on what it served.
	MinRequests int
	Window      time.Duration
	// ErrorMargin is how much higher (0.02: two points) the canary's
	// error rate may be than the current version's.
	ErrorMargin float64
	// LatencyMargin is how many times the current version's median time
	// to first token the canary's may be (plus LatencySlack, so that two
	// fast versions are not told apart by noise); SpeedMargin the least
	// part of its tokens per second. Neither is judged on fewer than
	// MinSamples answers of each.
	LatencyMargin float64
	LatencySlack  time.Duration
	SpeedMargin   float64
	MinSamples    int
	// FailFast is how many failures of the canary end the trial at once
	// when its error rate is already past the margin.
	FailFast int
}

// DefaultPolicy is the policy an update is judged by unless the operator
// says otherwise.
var DefaultPolicy = Policy{
	MinRequests: 50, Window: 30 * time.Minute,
	ErrorMargin: 0.02, LatencyMargin: 1.5, LatencySlack: 50 * time.Millisecond, SpeedMargin: 0.67, MinSamples: 5,
	FailFast: 3,
}

// Verdict is what to do with a canary.
type Verdict int

const (
	Wait Verdict = iota
	Promote
	RollBack
)

func (v Verdict) String() string {
	return [...]string{"wait", "promote", "roll back"}[v]
}

// Judge says what to do with the canary after elapsed of its window, from
// the current version's requests (cur) and the canary's (can) over the same
// time, with the reason in a sentence.
func (p Policy) Judge(cur, can Arm, elapsed time.Duration) (Verdict, string) {
	errorsWorse := can.Failed > 0 && can.ErrorRate() > cur.ErrorRate()+p.ErrorMargin
	errorsSaid := fmt.Sprintf("its error rate is %s (%d of %d requests) against %s for the current version",
		words.Percent(can.ErrorRate()), can.Failed, can.Requests, words.Percent(cur.ErrorRate()))
	if errorsWorse && can.Failed >= p.FailFast {
		return RollBack, errorsSaid
	}
	if can.Requests < p.MinRequests && elapsed < p.Window {
		return Wait, fmt.Sprintf("%d of the %d requests it is judged on, %s of %s", can.Requests, p.MinRequests,
			words.Span(elapsed), words.Span(p.Window))
	}
	if errorsWorse {
		return RollBack, errorsSaid
	}
	timed := can.Answered >= p.MinSamples && cur.Answered >= p.MinSamples
	if timed && cur.TTFT > 0 && can.TTFT > time.Duration(float64(cur.TTFT)*p.LatencyMargin)+p.LatencySlack {
		return RollBack, fmt.Sprintf("its first token comes after %s (median) against %s for the current version",
			can.TTFT.Round(time.Millisecond), cur.TTFT.Round(time.Millisecond))
	}
	if timed && cur.TokensPerSecond > 0 && can.TokensPerSecond < cur.TokensPerSecond*p.SpeedMargin {
		return RollBack, fmt.Sprintf("it generates %.1f tokens/s against %.1f for the current version",
			can.TokensPerSecond, cur.TokensPerSecond)
	}
	if can.Requests == 0 {
		return Promote, fmt.Sprintf("no request reached it in %s, so it is promoted on its eval and smoke test alone", words.Span(p.Window))
	}
	s := fmt.Sprintf("no worse than the current version over %d requests: errors %s against %s", can.Requests,
		words.Percent(can.ErrorRate()), words.Percent(cur.ErrorRate()))
	if timed {
		s += fmt.Sprintf(", first token %s against %s, %.1f tokens/s against %.1f", can.TTFT.Round(time.Millisecond),
			cur.TTFT.Round(time.Millisecond), can.TokensPerSecond, cur.TokensPerSecond)
	}
	return Promote, s
}

// Eval is an eval suite's result on one version.
type Eval struct{ Passed, Total int }

func (e Eval) rate() float64 {
	if e.Total == 0 {
		return 0
	}
	return float64(e.Passed) / float64(e.Total)
}

// JudgeEval says whether the canary's eval result (can) is worse than the
// current version's (cur): a lower pass rate rolls it back.
func JudgeEval(cur, can Eval) (Verdict, string) {
	said := fmt.Sprintf("its eval passed %d of %d cases against %d of %d for the current version", can.Passed, can.Total, cur.Passed, cur.Total)
	if can.rate() < cur.rate() {
		return RollBack, said
	}
	return Promote, said
}
