package jobs

import (
	"strings"
	"testing"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
)

// TestOfflineJobSaysItNeedsTheHub: with HF_HUB_OFFLINE, a job for a Hub
// repository fails at the registry step in a sentence that names the
// setting, and the Hub is asked nothing.
func TestOfflineJobSaysItNeedsTheHub(t *testing.T) {
	e := newEnv(t, withNodeMemory(64<<30), func(e *testEnv) {
		c, err := hf.NewClient(hf.Options{Endpoint: e.hub.URL(), Offline: true, MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		e.client = c
	})
	e.addModel(tinyRepo, hubtest.RepoOptions{}, map[string]ggufgen.Spec{tinyFile: {}})
	j := MustEnd(t, e.srv, MustStart(t, e.srv, Request{Repo: tinyRepo, Replicas: 1}).ID)
	if j.State != Failed || !strings.Contains(j.Error, "HF_HUB_OFFLINE") || !strings.Contains(j.Error, tinyRepo) {
		t.Fatalf("the job ended %s: %q; want it failed, naming the repository and HF_HUB_OFFLINE", j.State, j.Error)
	}
	if st := MustStep(t, j, StepRegistry); st.State != Failed {
		t.Errorf("the registry step is %s, want failed", st.State)
	}
	if n := len(e.hub.Log()); n != 0 {
		t.Errorf("the Hub was asked %d times while offline", n)
	}
}
