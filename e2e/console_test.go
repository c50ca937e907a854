//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestCatalogAndFleetFollowTheModel: with a model served, the catalog page
// counts a request made through the gateway without a reload, and shows
// the tokens a second the smoke test measured beside the estimate; the
// fleet page shows its replica as one compact row whose details, once
// opened, stay open while the live figures change under them.
func TestCatalogAndFleetFollowTheModel(t *testing.T) {
	e := setup(t)
	const repo, set = "acme/Live-Llama-GGUF", "Live-Llama-Q8_0"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 2048}))
	tb := e.newTab(t)
	tb.serve(repo, set, "")
	if state := tb.waitEnded(jobLimit); state != "done" {
		msg, _ := tb.loc("[data-testid=outcome]").InnerText()
		t.Fatalf("the job ended %s: %s", state, msg)
	}
	model, err := tb.loc("[data-testid=job-model]").TextContent()
	tb.must(err, "reading the model's name")
	model = strings.TrimSpace(model)
	ask := func() {
		t.Helper()
		var out map[string]any
		e.srv.api("POST", "/v1/chat/completions", map[string]any{"model": model, "max_tokens": 8,
			"messages": []map[string]string{{"role": "user", "content": "Say hello."}}}, &out)
	}

	// 1. The catalog: live, and its speeds.
	tb.open("/catalog")
	_, err = tb.page.Evaluate(`() => { window.__marker = 1 }`)
	tb.must(err, "setting the marker")
	row := tb.loc(fmt.Sprintf("[data-testid=model-row][data-model=%q]", model))
	// The smoke test's request is the first in the gateway's minute.
	tb.must(tb.expect().Locator(row.Locator("[data-testid=requests]")).ToHaveText("1 request"), "the smoke test's request counted")
	tb.must(tb.expect().Locator(row.Locator("[data-testid=speed-measured]")).ToHaveText(regexp.MustCompile(`^[0-9.]+ tokens/s measured$`)),
		"the smoke test's speed on the catalog")
	tb.must(tb.expect().Locator(row.Locator("[data-testid=speed-estimate]")).ToHaveText(regexp.MustCompile(`^≈ [0-9.]+ tokens/s estimated$`)),
		"the plan's estimate beside it")
	ask()
	tb.must(tb.expect().Locator(row.Locator("[data-testid=requests]")).ToHaveText("2 requests", playwright.LocatorAssertionsToHaveTextOptions{Timeout: playwright.Float(10000)}),
		"the request counted on the catalog page without a reload")
	if marker, err := tb.page.Evaluate(`() => window.__marker`); err != nil || marker != 1 {
		t.Errorf("the catalog page was reloaded (marker %v, %v): it should follow by its stream", marker, err)
	}

	// 2. The fleet: a row a replica, its details on demand.
	tb.open("/fleet")
	rep := tb.loc(fmt.Sprintf("[data-testid=replica][data-replica=%q]", model+"-1"))
	tb.must(tb.expect().Locator(rep).ToHaveAttribute("data-state", "ready"), "the replica ready on the fleet page")
	box, err := rep.Locator("tr").First().BoundingBox()
	tb.must(err, "measuring the replica's row")
	if box.Height > 160 {
		t.Errorf("the replica's row is %.0f px tall at 1280 px: want a compact row", box.Height)
		tb.screenshot("fleet-row.png")
	}
	more := rep.Locator("[data-testid=replica-more]")
	tb.must(tb.expect().Locator(more.Locator("[data-testid=endpoint]")).Not().ToBeVisible(), "the endpoint hidden until asked")
	tb.must(more.Locator("summary").Click(), "opening the replica's details")
	tb.must(tb.expect().Locator(more.Locator("[data-testid=endpoint]")).ToBeVisible(), "the endpoint shown once asked")
	before, err := rep.Locator("[data-testid=replica-load]").TextContent()
	tb.must(err, "reading the replica's load")
	ask()
	tb.must(tb.expect().Locator(rep.Locator("[data-testid=replica-load]")).Not().ToHaveText(before, playwright.LocatorAssertionsToHaveTextOptions{Timeout: playwright.Float(15000)}),
		"the load redrawn after a request")
	tb.must(tb.expect().Locator(more).ToHaveAttribute("open", ""), "the details still open after the replicas were redrawn")
	model1 := tb.loc(fmt.Sprintf("[data-testid=model-health][data-model=%q]", model))
	tb.must(tb.expect().Locator(model1.Locator("[data-testid=speed-measured]")).ToHaveText(regexp.MustCompile(`tokens/s measured$`)),
		"the measured speed on the fleet page")
}

// TestRefusalOffersWhatFits: a file no node could ever hold is refused at
// the plan step, before a byte is fetched; its job page offers no Retry,
// which would be refused again, but the smaller quantisation of the same
// repository that fits, and one click on it serves that.
func TestRefusalOffersWhatFits(t *testing.T) {
	e := setup(t)
	const repo = "acme/Big-And-Small-GGUF"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	// A 70B's header at its full size (40 GB, none of it held) beside a
	// tiny model that really loads, with the same trained context.
	big := ggufgen.Llama70B()
	addSparse(t, e.hub, repo, "Big-And-Small-Q4_K_M.gguf", big)
	e.hub.AddFile(repo, "Big-And-Small-Q2_K.gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: big.ContextLength}))

	var job apiJob
	e.srv.api("POST", "/api/v1/serve", map[string]any{"repo": repo, "file": "Big-And-Small-Q4_K_M.gguf", "cpu": true,
		"ctx_pool": 4096, "context_length": 4096, "name": "small-enough"}, &job)
	tb := e.newTab(t)
	tb.open("/jobs/" + job.ID)
	if state := tb.waitEnded(jobLimit); state != "failed" {
		t.Fatalf("the job ended %s; want the 70B refused", state)
	}
	tb.must(tb.expect().Locator(tb.loc("[data-testid=step][data-step=plan]")).ToHaveAttribute("data-state", "failed"), "refused at the plan step")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=retry]")).ToHaveCount(0), "no Retry for a refusal")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=refused]")).ToContainText("would be refused the same way again"), "the page says why not")
	offer := tb.loc("[data-testid=offer]").Filter(playwright.LocatorFilterOptions{HasText: "Q2_K, a smaller quantisation"})
	tb.must(tb.expect().Locator(offer).ToHaveCount(1), "the smaller quantisation offered")
	tb.must(offer.Locator("[data-testid=offer-take]").Click(), "taking the offer")
	tb.must(tb.expect().Page(tb.page).Not().ToHaveURL(regexp.MustCompile(job.ID+`$`)), "on the new job's page")
	if state := tb.waitEnded(jobLimit); state != "done" {
		msg, _ := tb.loc("[data-testid=outcome]").InnerText()
		t.Fatalf("the offered file ended %s: %s", state, msg)
	}
	tb.must(tb.expect().Locator(tb.loc("[data-testid=job-model]")).ToHaveText("small-enough"), "served under the name asked")
}

// addSparse serves spec at path at its full size without holding it: the
// header is written, the rest reads as zeros.
func addSparse(t *testing.T, hub *hubtest.Server, id, path string, spec ggufgen.Spec) {
	t.Helper()
	s := &sparse{}
	if err := ggufgen.Write(s, spec); err != nil {
		t.Fatal(err)
	}
	// A stand-in sha256: the plan reads the header, and nothing fetches
	// the file.
	sum := sha256.Sum256(append(append([]byte{}, s.data...), fmt.Sprint(s.size, path)...))
	hub.AddFileSpec(id, hubtest.FileSpec{Path: path, Size: s.size, Gen: s.gen, SHA256: hex.EncodeToString(sum[:])})
}

// sparse keeps what was written up to the last byte that is not zero,
// and the size.
type sparse struct {
	data      []byte
	pos, size int64
}

func (s *sparse) Write(p []byte) (int, error) {
	end := s.pos + int64(len(p))
	if end > int64(len(s.data)) && bytes.ContainsFunc(p, func(r rune) bool { return r != 0 }) {
		s.data = append(s.data, make([]byte, end-int64(len(s.data)))...)
	}
	if s.pos < int64(len(s.data)) {
		copy(s.data[s.pos:], p)
	}
	s.pos = end
	s.size = max(s.size, end)
	return len(p), nil
}

func (s *sparse) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		s.pos = off
	case io.SeekCurrent:
		s.pos += off
	default:
		return 0, errors.New("sparse: no SeekEnd")
	}
	return s.pos, nil
}

func (s *sparse) Truncate(size int64) error { s.size = size; return nil }

func (s *sparse) gen(off int64, p []byte) {
	clear(p)
	if off < int64(len(s.data)) {
		copy(p, s.data[off:])
	}
}
