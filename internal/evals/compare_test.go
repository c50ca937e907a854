package evals

import (
	"strings"
	"testing"

	"modelserve/internal/operr"
)

func TestCompare(t *testing.T) {
	results := func(pass ...bool) []Result {
		var out []Result
		for i, p := range pass {
			out = append(out, Result{Case: []string{"capital", "order", "yes"}[i], Pass: p})
		}
		return out
	}
	run := func(id int64, target string, pass ...bool) Run {
		r := Run{ID: id, Model: "chatty", Target: target, Suite: "abc", State: StateDone, Total: len(pass), Results: results(pass...)}
		for _, p := range pass {
			if p {
				r.Passed++
			}
		}
		return r
	}
	current := run(1, "chatty", true, true, false)
	for _, tc := range []struct {
		name      string
		candidate Run
		worse     bool
		why       string
	}{
		{"fewer pass", run(2, "chatty-v2", false, true, false), true, `chatty-v2 passed 1 of 3 cases of chatty's suite, fewer than chatty's 2 of 3; failing now: "capital"`},
		{"fewer pass, named", run(2, "chatty-v2", false, false, false), true, `chatty-v2 passed 0 of 3 cases of chatty's suite, fewer than chatty's 2 of 3; failing now: "capital", "order"`},
		{"as many", run(2, "chatty-v2", true, false, true), false, `chatty-v2 passed 2 of 3 cases of chatty's suite, as many as chatty`},
		{"more", run(2, "chatty-v2", true, true, true), false, `chatty-v2 passed 3 of 3 cases of chatty's suite, more than chatty's 2 of 3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			worse, why, err := Compare(current, tc.candidate)
			if err != nil || worse != tc.worse || !strings.HasPrefix(why, tc.why) {
				t.Errorf("Compare = %v, %q, %v; want %v, %q", worse, why, err, tc.worse, tc.why)
			}
		})
	}
	if _, why, _ := Compare(current, run(2, "chatty-v2", false, false, false)); strings.Contains(why, `"yes"`) {
		t.Errorf("a case that failed in both is named as failing now: %q", why)
	}

	running := run(3, "chatty-v2", true)
	running.State = StateRunning
	other := run(4, "chatty-v2", true, true, true)
	other.Suite = "def"
	elsewhere := run(5, "embedder", true, true, true)
	elsewhere.Model = "embedder"
	for _, tc := range []struct {
		name      string
		candidate Run
		want      string
	}{
		{"not done", running, "eval run 3 of chatty-v2 is running, not done"},
		{"another suite", other, "eval runs 1 and 4 asked different suites of chatty (abc and def)"},
		{"another model", elsewhere, "eval run 1 ran chatty's suite and run 5 embedder's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Compare(current, tc.candidate)
			if e, ok := operr.As(err); !ok || e.Kind != operr.Conflict || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("Compare = %v; want a conflict saying %q", err, tc.want)
			}
		})
	}
}

func TestListNames(t *testing.T) {
	if got := listNames([]string{"a", "b", "c", "d"}, 2); got != `"a", "b", and 2 more` {
		t.Errorf("listNames = %q", got)
	}
}
