package plan

import (
	"encoding/json"
	"testing"

	"modelserve/catalog"
)

// TestSizingAndPlanKeepTheirJSON: a plan and a sizing carry a serving size
// in Go and say it in the fields the repository API always had ("context"
// and "parallel"; "ctx_pool", "slots" and "context_length"), which read
// back as the same size.
func TestSizingAndPlanKeepTheirJSON(t *testing.T) {
	size := catalog.Size{Pool: 16384, Slots: 4}
	sz := Sizing{Size: size, NeedBytes: 7, Fit: FitsNow}
	var got map[string]any
	b, _ := json.Marshal(sz)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["ctx_pool"] != 16384.0 || got["slots"] != 4.0 || got["context_length"] != 4096.0 || got["need_bytes"] != 7.0 || got["fit"] != FitsNow || got["Size"] != nil {
		t.Errorf("a sizing is written as %s", b)
	}
	var back Sizing
	if err := json.Unmarshal(b, &back); err != nil || back != sz {
		t.Errorf("read back as %+v (%v), want %+v", back, err, sz)
	}

	pl := Plan{Repo: "acme/model", Commit: "abc", Size: size, Embedding: true}
	b, _ = json.Marshal(pl)
	got = nil
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got["repo"] != "acme/model" || got["context"] != 16384.0 || got["parallel"] != 4.0 || got["embedding"] != true || got["Size"] != nil {
		t.Errorf("a plan is written as %s", b)
	}
	var pb Plan
	if err := json.Unmarshal(b, &pb); err != nil || pb.Size != size || pb.Repo != "acme/model" || pb.Commit != "abc" || !pb.Embedding {
		t.Errorf("read back as %+v (%v)", pb, err)
	}
}
