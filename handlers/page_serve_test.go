package handlers_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/PuerkitoBio/goquery"

	"modelserve/handlers"
	"modelserve/internal/ggufgen"
	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
	"modelserve/internal/plan"
)

// The serve page is tested against the real planner and the real registry
// client, reading real GGUF headers from internal/hubtest: files that
// declare Llama 3.1 8B's shape at its real sizes, whose weights are zeros
// that take no memory.

const llamaRepo = "meta/Llama-3.1-8B-Instruct-GGUF"

// sparseFile keeps what was written and takes the rest as zeros.
type sparseFile struct {
	data []byte
	pos  int64
	size int64
}

func (s *sparseFile) Write(p []byte) (int, error) {
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

func (s *sparseFile) Seek(off int64, whence int) (int64, error) {
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

func (s *sparseFile) Truncate(size int64) error { s.size = size; return nil }

func (s *sparseFile) gen(off int64, p []byte) {
	clear(p)
	if off < int64(len(s.data)) {
		copy(p, s.data[off:])
	}
}

// addModel serves spec at path, at its full size.
func addModel(t testing.TB, hub *hubtest.Server, id, path string, spec ggufgen.Spec) {
	t.Helper()
	s := &sparseFile{}
	if err := ggufgen.Write(s, spec); err != nil {
		t.Fatal(err)
	}
	// A stand-in sha256: hashing gigabytes of zeros would take the test
	// minutes.
	sum := sha256.Sum256(append(append([]byte{}, s.data...), fmt.Sprint(s.size, path)...))
	hub.AddFileSpec(id, hubtest.FileSpec{Path: path, Size: s.size, Gen: s.gen, SHA256: hex.EncodeToString(sum[:])})
}

func withType(s ggufgen.Spec, t ggufgen.TensorType) ggufgen.Spec { s.TensorType = t; return s }

// plannedEnv is a console whose registry is hubtest and whose planner is
// the real one, for a pool of one node with a T4.
func plannedEnv(t *testing.T) (*consoleEnv, *hubtest.Server) {
	t.Helper()
	hub := hubtest.New(t)
	hub.AddRepo(llamaRepo, hubtest.RepoOptions{})
	addModel(t, hub, llamaRepo, "Llama-3.1-8B-Instruct-Q4_K_M.gguf", ggufgen.Llama8B())
	addModel(t, hub, llamaRepo, "Llama-3.1-8B-Instruct-Q8_0.gguf", withType(ggufgen.Llama8B(), ggufgen.Q8_0))
	addModel(t, hub, llamaRepo, "Llama-3.1-8B-Instruct-F16.gguf", withType(ggufgen.Llama8B(), ggufgen.F16))
	hub.AddFile(llamaRepo, "README.md", []byte("# Llama"))
	hub.AddRepo("meta/gated-GGUF", hubtest.RepoOptions{Gated: "manual"})
	addModel(t, hub, "meta/gated-GGUF", "gated-Q4_K_M.gguf", ggufgen.Llama8B())

	client, err := hf.NewClient(hf.Options{Endpoint: hub.URL(), MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	pool := poolOf(t, `[{"name": "node-1", "cpu_cores": 16, "ram_gb": 64, "gpus": [{"class": "T4", "count": 1}]}]`)
	planner, err := plan.New(plan.Config{Pool: pool.Nodes, Headers: plan.ReadHeaders(client), DownloadURL: client.DownloadURL,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Registry, d.Planner, d.Pool = client, planner, pool })
	return e, hub
}

func TestServePageShowsThePlan(t *testing.T) {
	e, _ := plannedEnv(t)
	b := e.signedIn()
	doc := mustStatus(t, b.get("/serve?repo="+url.QueryEscape(llamaRepo)), http.StatusOK)

	rows := doc.Find(`[data-testid="set-row"]`)
	if rows.Length() != 3 {
		t.Fatalf("%d file sets, want 3", rows.Length())
	}
	rec := doc.Find(`[data-testid="set-row"]:has([data-testid="recommended"])`)
	if rec.Length() != 1 {
		t.Fatalf("%d sets marked recommended, want 1", rec.Length())
	}
	if got := rec.AttrOr("data-set", ""); got != "Llama-3.1-8B-Instruct-Q8_0" {
		t.Errorf("recommended %q; a T4 holds the 8B at Q8_0 with the default pool, not F16", got)
	}
	if got := doc.Find(`[data-testid="recommended"]`).Text(); !strings.Contains(got, "recommended") {
		t.Errorf("the mark says %q: it must say it in words", got)
	}
	// Each option is a badge in words: where, and whether it fits.
	fits := texts(rec.Find(`[data-testid="fit"]`))
	if !containsAll(fits, "✓ 1×T4: fits now", "✓ CPU: fits now") {
		t.Errorf("the recommended set's fits: %q", fits)
	}
	// F16's 15 GB of weights leave a 16 GB T4 room for a short context
	// only: it fits with the default pool cut, and says so.
	// The reason is text on the page, not a title only a mouse finds.
	f16 := doc.Find(`[data-testid="set-row"][data-set="Llama-3.1-8B-Instruct-F16"] .fit`).First()
	if got, why := f16.Find(`[data-testid="fit"]`).Text(), f16.Find(`[data-testid="fit-why"]`).Text(); !strings.Contains(got, "1×T4") || !strings.Contains(why, "16384 tokens in 4 slots of 4096 cut to") {
		t.Errorf("F16 on the T4: %q, why %q; want the default pool said to be cut to fit", got, why)
	}
	if got := texts(rec.Find("td")); got[1] != "Q8_0" || got[2] != "8.5 GB" || got[3] != "1" || !strings.HasPrefix(got[5], "≈ ") {
		t.Errorf("the recommended row reads %q", got)
	}
	if got := doc.Find(`[data-testid="commit"]`).Text(); len(got) != 7 {
		t.Errorf("commit %q", got)
	}
	if doc.Find(`[data-testid="reason"]`).Text() == "" {
		t.Error("no sentence says why it is recommended")
	}
	// The recommended set is chosen, and the sizing filled from it.
	if got := doc.Find(`[data-testid="chosen"]`).Text(); got != "Llama-3.1-8B-Instruct-Q8_0" {
		t.Errorf("chosen %q", got)
	}
	// Filled with the default the API serves with, not the longest that
	// fits: a model served from the console left a second no room. The
	// longest is offered beside it, larger.
	pool := doc.Find(`input[name="ctx_pool"]`).AttrOr("value", "")
	slots := doc.Find(`input[name="slots"]`).AttrOr("value", "")
	if pool != "16384" || slots != "4" {
		t.Errorf("the form is filled with a pool of %q in %q slots, want the default 16384 in 4", pool, slots)
	}
	longest := doc.Find(`[data-testid="longest"]`)
	if lp, _ := strconv.Atoi(longest.AttrOr("data-fill-pool", "")); lp <= 16384 || longest.AttrOr("data-fill-slots", "") == "" ||
		!strings.Contains(longest.Text(), "Longest that fits: "+strconv.Itoa(lp)+" tokens") {
		t.Errorf("the longest that fits is offered as %q (pool %q): want a larger pool, one click away", strings.TrimSpace(longest.Text()), longest.AttrOr("data-fill-pool", ""))
	}
	if got := doc.Find(`select[name="where"] option[selected]`).Text(); !strings.HasPrefix(got, "1×T4") {
		t.Errorf("runs on %q", got)
	}
	if got := doc.Find(`input[name="name"]`).AttrOr("placeholder", ""); got != "llama-3.1-8b-instruct" {
		t.Errorf("suggested name %q", got)
	}
	bars := doc.Find(`[data-testid="memory"] [data-testid="bar"]`)
	if bars.Length() < 2 {
		t.Fatalf("%d memory bars, want one per option", bars.Length())
	}
	// Every field has a label.
	doc.Find("input:not([type=hidden]), select, textarea").Each(func(_ int, s *goquery.Selection) {
		if s.ParentsFiltered("label").Length() == 0 {
			t.Errorf("the field %s has no label", s.AttrOr("name", "?"))
		}
	})
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

func TestServeFragments(t *testing.T) {
	e, _ := plannedEnv(t)
	b := e.signedIn()
	q := url.Values{"repo": {llamaRepo}, "replicas": {"2"}, "name": {"my-llama"}}

	// The report for htmx is the fragment, with what was typed kept.
	resp := b.get("/serve/report?"+q.Encode(), htmx...)
	doc := mustStatus(t, resp, http.StatusOK)
	if doc.Find("html > body > main, nav").Length() != 0 || doc.Find(`[data-testid="sets"]`).Length() != 1 {
		t.Fatal("the report fragment is a page, or has no table")
	}
	if doc.Find(`input[name="replicas"]`).AttrOr("value", "") != "2" || doc.Find(`input[name="name"]`).AttrOr("value", "") != "my-llama" {
		t.Error("the fragment lost what was typed")
	}

	// Choosing another file marks it and fills the context for it.
	q.Set("file", "Llama-3.1-8B-Instruct-Q4_K_M")
	q.Set("chosen", "Llama-3.1-8B-Instruct-Q8_0")
	q.Set("ctx_pool", "1234")
	doc = mustStatus(t, b.get("/serve/report?"+q.Encode(), htmx...), http.StatusOK)
	chosen := doc.Find(`[data-testid="set-row"]:has([data-testid="chosen-mark"])`)
	if chosen.AttrOr("data-set", "") != "Llama-3.1-8B-Instruct-Q4_K_M" {
		t.Fatalf("chosen %q", chosen.AttrOr("data-set", ""))
	}
	q4pool := doc.Find(`input[name="ctx_pool"]`).AttrOr("value", "")
	if q4pool == "1234" || q4pool == "" {
		t.Errorf("choosing a file left the context at %q", q4pool)
	}

	// A pool without slots is divided as the job will divide it.
	perSlot := func(pool, slots string) string {
		m := url.Values{"repo": {llamaRepo}, "chosen": {"Llama-3.1-8B-Instruct-Q4_K_M"}, "ctx_pool": {pool}, "slots": {slots}}
		doc := mustStatus(t, b.get("/serve/report?"+m.Encode(), htmx...), http.StatusOK)
		return doc.Find(`[data-testid="per-slot"]`).Text()
	}
	if got := perSlot("65536", ""); got != "16 slots of 4096 tokens each" {
		t.Errorf("a 65536-token pool shows %q, not the job's 16 slots of 4096", got)
	}
	if got := perSlot("65536", "2"); got != "2 slots of 32768 tokens each" {
		t.Errorf("2 slots of a 65536-token pool show %q", got)
	}

	// The memory bars follow the context.
	memory := func(ctx string) string {
		m := url.Values{"repo": {llamaRepo}, "chosen": {"Llama-3.1-8B-Instruct-Q4_K_M"}, "ctx_pool": {ctx}}
		doc := mustStatus(t, b.get("/serve/memory?"+m.Encode(), htmx...), http.StatusOK)
		return doc.Find(`[data-testid="bar-text"]`).First().Text()
	}
	small, large := memory("8192"), memory("131072")
	// The slots' sentence follows what is typed, beside the memory.
	m := url.Values{"repo": {llamaRepo}, "chosen": {"Llama-3.1-8B-Instruct-Q4_K_M"}, "ctx_pool": {"65536"}, "slots": {"2"}}
	if got := mustStatus(t, b.get("/serve/memory?"+m.Encode(), htmx...), http.StatusOK).Find(`[data-testid="per-slot"][hx-swap-oob]`).Text(); got != "2 slots of 32768 tokens each" {
		t.Errorf("typing 65536 in 2 slots says %q under the slots", got)
	}
	if !strings.Contains(small, "for 8192 tokens") || !strings.Contains(large, "for 131072 tokens") || small == large {
		t.Errorf("memory at 8192: %q\nat 131072: %q", small, large)
	}
}

func TestServeLookupErrorsInPlace(t *testing.T) {
	e, _ := plannedEnv(t)
	b := e.signedIn()
	cases := []struct{ name, repo, want string }{
		{"no such repository", "meta/nothing-here", "meta/nothing-here"},
		{"not a repository name", "just-a-name", `"just-a-name" is not a repository`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// 200, so that htmx swaps the sentence in where the table
			// would be.
			doc := mustStatus(t, b.get("/serve/report?repo="+url.QueryEscape(tc.repo), htmx...), http.StatusOK)
			if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, tc.want) {
				t.Fatalf("says %q, want it to name %q", got, tc.want)
			}
		})
	}
	t.Run("gated without a token", func(t *testing.T) {
		doc := mustStatus(t, b.get("/serve/report?repo=meta/gated-GGUF", htmx...), http.StatusOK)
		if got := doc.Find(`[data-testid="gated"]`).Text(); !strings.Contains(got, "gated") {
			t.Errorf("gated badge %q", got)
		}
		if got := doc.Find(`[role="alert"]`).Text(); !strings.Contains(got, "gated") {
			t.Errorf("no sentence says the files cannot be downloaded: %q", got)
		}
	})
}

func TestServeSubmit(t *testing.T) {
	e := newConsoleEnv(t)
	e.reg.add(ggufRepo("test/tiny-GGUF"))
	b := e.signedIn()

	// A request the job server refuses comes back as the form, kept.
	form := url.Values{"repo": {"test/tiny-GGUF"}, "replicas": {"1"}, "name": {"Bad Name"}, "description": {"kept"}}
	doc := mustStatus(t, b.post("/serve", form), http.StatusBadRequest)
	if got := doc.Find(`form#serve-form > [role="alert"]`).Text(); !strings.Contains(got, `the model name "Bad Name" is not allowed`) {
		t.Errorf("refusal says %q", got)
	}
	if doc.Find(`input[name="description"]`).AttrOr("value", "") != "kept" {
		t.Error("the refused form lost what was typed")
	}
	form.Set("name", "")
	form.Set("replicas", "many")
	doc = mustStatus(t, b.post("/serve", form), http.StatusBadRequest)
	if got := doc.Find(`form#serve-form > [role="alert"]`).Text(); got != `replicas is a whole number from 0, not "many"` {
		t.Errorf("refusal says %q", got)
	}

	// A good one starts a job, and the browser goes to it.
	form.Set("replicas", "0")
	form.Set("env", "GGML_CUDA_NO_PINNED=1")
	form.Set("aliases", "little, small")
	resp := b.post("/serve", form)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/jobs/serve-") {
		t.Fatalf("%s to %q: %s", resp.Status, loc, mustDoc(t, resp).Find(`[role="alert"]`).Text())
	}
	resp.Body.Close()
	j, err := e.jobs.Get(t.Context(), strings.TrimPrefix(loc, "/jobs/"))
	if err != nil {
		t.Fatal(err)
	}
	if j.Request.Replicas != 0 || j.Request.Env["GGML_CUDA_NO_PINNED"] != "1" || strings.Join(j.Request.Aliases, ",") != "little,small" ||
		j.Request.By != testUser {
		t.Errorf("the job's request: %+v", j.Request)
	}
}

// A registry's names are text: a repository or a file named like markup
// shows as its name and makes no element.
func TestServePageEscapesRegistryNames(t *testing.T) {
	e := newConsoleEnv(t)
	const repoName = "<script>alert(1)</script>"
	const fileName = `"><img src=x onerror=alert(1)>`
	e.reg.any = &hf.Repo{ID: repoName, Commit: strings.Repeat("1", 40), Files: []hf.File{
		{Path: fileName + "-Q4_K_M.gguf", Size: 1 << 30},
		{Path: fileName + "-mmproj.gguf", Size: 1 << 20},
	}}
	b := e.signedIn()
	for _, path := range []string{"/serve?repo=evil/repo", "/serve/report?repo=evil/repo"} {
		t.Run(path, func(t *testing.T) {
			resp := b.get(path, htmx...)
			doc := mustStatus(t, resp, http.StatusOK)
			if n := doc.Find("script:not([src]), img").Length(); n != 0 {
				html, _ := doc.Html()
				t.Fatalf("%d script or img elements made from registry names:\n%s", n, html)
			}
			if got := doc.Find(`[data-testid="report-repo"]`).Text(); got != repoName {
				t.Errorf("the repository shows as %q", got)
			}
			if got := doc.Find(`[data-testid="set-name"]`).Text(); got != fileName+"-Q4_K_M" {
				t.Errorf("the file shows as %q", got)
			}
			doc.Find("[onerror], [onload]").Each(func(_ int, s *goquery.Selection) {
				t.Errorf("an element with an event handler: %s", goquery.NodeName(s))
			})
		})
	}
}

// TestServeIsDisabledForWhatCannotBeServed: a file that fits no node of the
// pool, or a gated repository the token may not download, leaves Serve
// disabled with the reason in words; what fits is served.
func TestServeIsDisabledForWhatCannotBeServed(t *testing.T) {
	e, hub := plannedEnv(t)
	hub.AddRepo("meta/Llama-3.1-70B-Instruct-GGUF", hubtest.RepoOptions{})
	addModel(t, hub, "meta/Llama-3.1-70B-Instruct-GGUF", "Llama-3.1-70B-Instruct-Q8_0.gguf", withType(ggufgen.Llama70B(), ggufgen.Q8_0))
	b := e.signedIn()
	for _, tc := range []struct {
		name, query string
		// blocked is the start of the reason; "" expects Serve enabled.
		blocked string
	}{
		{"a file that fits", "repo=" + url.QueryEscape(llamaRepo), ""},
		{"a file that fits no node", "repo=meta/Llama-3.1-70B-Instruct-GGUF&file=Llama-3.1-70B-Instruct-Q8_0",
			"This file fits no node of the pool: Llama-3.1-70B-Instruct-Q8_0 does not fit on a T4: needs "},
		{"a repository nothing of which fits", "repo=meta/Llama-3.1-70B-Instruct-GGUF",
			"Nothing here can be served: no file fits this pool"},
		{"a gated repository without a token", "repo=meta/gated-GGUF", "Serving needs a token with access to this repository."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := mustStatus(t, b.get("/serve?"+tc.query), http.StatusOK)
			button := doc.Find(`[data-testid="serve-submit"]`)
			_, disabled := button.Attr("disabled")
			reason := doc.Find(`[data-testid="serve-blocked"]`).Text()
			if tc.blocked == "" {
				if disabled || reason != "" {
					t.Errorf("Serve is disabled (%q) for a file that fits", reason)
				}
				return
			}
			if !disabled || !strings.HasPrefix(reason, tc.blocked) {
				t.Errorf("Serve disabled %v, reason %q; want it disabled saying %q", disabled, reason, tc.blocked)
			}
			if id, _ := button.Attr("aria-describedby"); id != "serve-blocked" {
				t.Errorf("the disabled button is not described by its reason")
			}
		})
	}
}

// TestServeHeadlineSaysWhatTheBarSays: the plan's headline and the chosen
// option's memory bar give the one figure the file needs (they said 573.4
// and 569.9 MB, one from a figure rounded to a hundredth of a GiB), and a
// context typed that the file does not fit turns the headline too: it
// stops saying the file fits.
func TestServeHeadlineSaysWhatTheBarSays(t *testing.T) {
	e, hub := plannedEnv(t)
	// A small model's figures are megabytes, where a figure rounded to a
	// hundredth of a GiB is off by several.
	const tinyRepo = "acme/tiny-GGUF"
	hub.AddRepo(tinyRepo, hubtest.RepoOptions{})
	hub.AddFile(tinyRepo, "tiny-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{}))
	b := e.signedIn()
	for _, repo := range []string{llamaRepo, tinyRepo} {
		doc := mustStatus(t, b.get("/serve?repo="+url.QueryEscape(repo)), http.StatusOK)
		headline := doc.Find(`[data-testid="reason"]`).Text()
		var t4 string
		doc.Find(`[data-testid="memory"] [data-testid="bar"]`).Each(func(_ int, s *goquery.Selection) {
			if s.Find("strong").Text() == "1×T4" {
				t4 = s.Find(`[data-testid="bar-text"]`).Text()
			}
		})
		// "weights … + engine … = 9.3 GB of 17.2 GB free of the card: …"
		_, need, _ := strings.Cut(t4, " = ")
		need, _, _ = strings.Cut(need, " of ")
		if need == "" || !strings.Contains(headline, "fits: "+need+" with a ") || !strings.Contains(headline, " on a T4") {
			t.Errorf("%s: the headline says %q\nand the T4's bar %q: want the bar's %q in the headline", repo, headline, t4, need)
		}
	}

	// A pool the T4 does not hold for any file: the headline, swapped
	// beside the bars, no longer says it fits.
	m := url.Values{"repo": {llamaRepo}, "chosen": {"Llama-3.1-8B-Instruct-Q8_0"}, "where": {"gpu:T4:1:1"}, "ctx_pool": {"1048576"}, "slots": {"1"}}
	doc := mustStatus(t, b.get("/serve/memory?"+m.Encode(), htmx...), http.StatusOK)
	swapped := doc.Find(`[data-testid="reason"][hx-swap-oob]`)
	if swapped.Length() != 1 {
		t.Fatal("typing a pool leaves the headline as it was: it is not swapped beside the bars")
	}
	if got := swapped.Text(); strings.Contains(got, "fits:") || !strings.Contains(got, "no file fits") {
		t.Errorf("with a pool of 1048576 tokens the headline says %q; want it to say no file fits", got)
	}
}
