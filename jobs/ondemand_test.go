package jobs

import (
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestOnDemandJobSaysNoReplicaStarted: a job that adds a model on demand
// ends done, and its last steps say that nothing was started and why, so
// "done" is not read as "running".
func TestOnDemandJobSaysNoReplicaStarted(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30))
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 0}).ID)
	if j.State != Done {
		t.Fatalf("the job ended %s: %s", j.State, j.Error)
	}
	place, ok := j.Step(StepPlacement)
	if !ok || place.State != Skipped || !strings.Contains(place.Detail, "no replica started") || !strings.Contains(place.Detail, "on demand") {
		t.Errorf("placement %+v: want skipped, saying no replica started as it is on demand", place)
	}
	last := j.Steps[len(j.Steps)-1]
	if last.Name != StepSmoke || last.State != Skipped || !strings.Contains(last.Detail, "no replica") {
		t.Errorf("the last step %+v: want the smoke test skipped, saying there was no replica to ask", last)
	}
}
