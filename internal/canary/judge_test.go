package canary

import (
	"strings"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	p := DefaultPolicy
	p.MinRequests, p.Window = 20, time.Minute
	steady := Arm{Requests: 180, Failed: 0, Answered: 180, TTFT: 100 * time.Millisecond, TokensPerSecond: 50}
	for _, c := range []struct {
		name    string
		cur     Arm
		can     Arm
		elapsed time.Duration
		want    Verdict
		says    string
	}{
		{"too few requests yet", steady, Arm{Requests: 5, Answered: 5}, 10 * time.Second, Wait, "5 of the 20 requests"},
		{"failing fast rolls back before the count", steady, Arm{Requests: 4, Failed: 3, Answered: 1}, time.Second, RollBack,
			"its error rate is 75% (3 of 4 requests) against 0%"},
		{"one failure in few is not yet enough", steady, Arm{Requests: 4, Failed: 1, Answered: 3}, time.Second, Wait, "4 of the 20"},
		{"as good as the current version", steady, Arm{Requests: 20, Answered: 20, TTFT: 110 * time.Millisecond, TokensPerSecond: 48},
			time.Minute / 2, Promote, "no worse than the current version over 20 requests"},
		{"errors within the margin", Arm{Requests: 100, Failed: 5, Answered: 95, TTFT: time.Second, TokensPerSecond: 10},
			Arm{Requests: 20, Failed: 1, Answered: 19, TTFT: time.Second, TokensPerSecond: 10}, time.Minute, Promote, "errors 5% against 5%"},
		{"errors past the margin at the window's end", steady, Arm{Requests: 20, Failed: 2, Answered: 18}, time.Minute, RollBack,
			"its error rate is 10% (2 of 20 requests)"},
		{"slow to the first token", steady, Arm{Requests: 20, Answered: 20, TTFT: 400 * time.Millisecond, TokensPerSecond: 50},
			time.Minute, RollBack, "its first token comes after 400ms (median) against 100ms"},
		{"slow to generate", steady, Arm{Requests: 20, Answered: 20, TTFT: 100 * time.Millisecond, TokensPerSecond: 20},
			time.Minute, RollBack, "it generates 20.0 tokens/s against 50.0"},
		{"too few answers to judge speed", steady, Arm{Requests: 20, Failed: 0, Answered: 3, TTFT: time.Second, TokensPerSecond: 1},
			time.Minute, Promote, "no worse"},
		{"no traffic in the window", steady, Arm{}, time.Minute, Promote, "no request reached it in 1m"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, why := p.Judge(c.cur, c.can, c.elapsed)
			if v != c.want || !strings.Contains(why, c.says) {
				t.Errorf("Judge = %s, %q; want %s saying %q", v, why, c.want, c.says)
			}
		})
	}
}

func TestJudgeEval(t *testing.T) {
	if v, why := JudgeEval(Eval{4, 5}, Eval{3, 5}); v != RollBack || why != "its eval passed 3 of 5 cases against 4 of 5 for the current version" {
		t.Errorf("a lower pass rate: %s, %q", v, why)
	}
	if v, _ := JudgeEval(Eval{4, 5}, Eval{4, 5}); v != Promote {
		t.Errorf("the same pass rate: %s", v)
	}
}
