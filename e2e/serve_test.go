//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
	"modelserve/internal/words"
)

// The steps of a job, in the order the job page lists them.
var steps = []string{"registry", "plan", "mirror", "check", "catalog", "placement", "smoke test"}

// recorder samples the job page every 50ms from inside the page: the state
// of each step and the mirror's progress bar. It also sets a marker a
// reload would wipe, so the samples prove the page changed in place.
const recorder = `() => {
	window.__marker = 1;
	window.__samples = [];
	const take = () => {
		const rows = [...document.querySelectorAll('[data-testid=step]')];
		const p = document.querySelector('[data-testid=step][data-step=mirror] progress');
		window.__samples.push({
			t: Date.now(),
			steps: Object.fromEntries(rows.map(li => [li.dataset.step,
				([...li.classList].find(c => c.startsWith('step-')) || '').slice(5)])),
			progress: p ? p.value : -1,
			max: p ? p.max : -1,
		});
	};
	take();
	window.__timer = setInterval(take, 50);
}`

type sample struct {
	T        float64           `json:"t"`
	Steps    map[string]string `json:"steps"`
	Progress float64           `json:"progress"`
	Max      float64           `json:"max"`
}

// TestServeAModel is the operator's main path: sign in, serve a model
// from the form, watch the job's steps finish one by one without reloading,
// read the reply, and find the model in the catalog and its replica on the
// fleet page.
func TestServeAModel(t *testing.T) {
	e := setup(t)
	const (
		repo  = "acme/Tiny-Llama-GGUF"
		set   = "Tiny-Llama-Q4_K_M"
		file  = set + ".gguf"
		other = "Tiny-Llama-Q8_0.gguf"
		size  = 32 << 20
		rate  = 6 << 20 // bytes a second: the fetch takes five seconds
	)
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, other, ggufgen.Bytes(ggufgen.Spec{ContextLength: 4096}))
	e.hub.AddFile(repo, file, ggufgen.Bytes(ggufgen.Spec{ContextLength: 4096, PadTo: size}))
	e.hub.Trickle(repo, file, rate)

	tb := e.newTab(t)
	id := tb.serve(repo, set, "serve.png")
	t.Logf("job %s", id)
	_, err := tb.page.Evaluate(recorder)
	tb.must(err, "starting the recorder")

	state := tb.waitEnded(jobLimit)
	raw, err := tb.page.Evaluate(`() => { clearInterval(window.__timer); return JSON.stringify({marker: window.__marker, samples: window.__samples}); }`)
	tb.must(err, "reading the recorder")
	var rec struct {
		Marker  any      `json:"marker"`
		Samples []sample `json:"samples"`
	}
	if err := json.Unmarshal([]byte(raw.(string)), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Marker == nil {
		t.Fatal("the job page was reloaded while the job ran: the marker set after it loaded is gone")
	}
	if state != "done" {
		msg, _ := tb.loc("[data-testid=outcome]").InnerText()
		t.Fatalf("the job ended %s: %s", state, msg)
	}
	tb.screenshot("job.png")
	tb.showsTruth(id)
	t.Logf("the page changed %d times in %d samples", changes(rec.Samples), len(rec.Samples))

	// The progress bar moved: two readings at least between empty and full,
	// each larger than the one before.
	var seen []float64
	for _, s := range rec.Samples {
		if s.Progress > 0 && s.Progress < s.Max && (len(seen) == 0 || s.Progress != seen[len(seen)-1]) {
			seen = append(seen, s.Progress)
		}
	}
	if len(seen) < 2 {
		t.Errorf("the progress bar showed %d values part-way (%v); want it to move while the file arrives", len(seen), seen)
	}
	if !slices.IsSorted(seen) {
		t.Errorf("the progress bar went backwards: %v", seen)
	}

	// The steps turned done one by one, in order: when each first showed
	// done, every step before it had, and the later ones had not all at once.
	first := map[string]int{}
	for i, s := range rec.Samples {
		for _, name := range steps {
			if _, ok := first[name]; !ok && s.Steps[name] == "done" {
				first[name] = i
				for _, before := range steps[:slices.Index(steps, name)] {
					if s.Steps[before] != "done" {
						t.Errorf("%s showed done while %s showed %s", name, before, s.Steps[before])
					}
				}
			}
		}
	}
	moments := map[int]bool{}
	for _, name := range steps {
		i, ok := first[name]
		if !ok {
			t.Errorf("the %s step never showed done on the page", name)
		}
		moments[i] = true
	}
	var when []string
	for _, name := range steps {
		if i, ok := first[name]; ok {
			when = append(when, fmt.Sprintf("%s %.1fs", name, (rec.Samples[i].T-rec.Samples[0].T)/1000))
		}
	}
	t.Logf("the progress bar showed %d values part-way; the steps showed done at: %s", len(seen), strings.Join(when, ", "))
	if len(moments) < 3 {
		t.Errorf("the steps turned done at %d moments only (%v); want them to follow the job", len(moments), first)
	}
	if rec.Samples[0].Steps["smoke test"] == "done" {
		t.Error("the job was finished before the page could show it running")
	}
	sawRunning := false
	for _, s := range rec.Samples {
		sawRunning = sawRunning || s.Steps["mirror"] == "running"
	}
	if !sawRunning {
		t.Error("the mirror step never showed running")
	}

	// The reply and its speed.
	reply, err := tb.loc("[data-testid=outcome] [data-testid=reply]").InnerText()
	tb.must(err, "reading the reply")
	if strings.TrimSpace(reply) == "" {
		t.Error("the job page shows an empty reply")
	}
	tps, err := tb.loc("[data-testid=outcome] [data-testid=tps]").InnerText()
	tb.must(err, "reading tokens per second")
	if v, err := strconv.ParseFloat(strings.ReplaceAll(strings.TrimSpace(tps), ",", ""), 64); err != nil || v <= 0 {
		t.Errorf("tokens per second shows %q; want a positive number", tps)
	}
	// The model's name is the API's: the page's heading names it only when
	// the job had named it before the page loaded.
	model := e.srv.job(id).Model
	if model == "" {
		t.Fatal("the job is done but names no model")
	}
	t.Logf("%s answered %q at %s tokens/s", model, reply, tps)

	// The catalog has it, from the repository: the job page links to it.
	toCatalog := tb.loc("[data-testid=outcome]").GetByRole("link", playwright.LocatorGetByRoleOptions{Name: model})
	tb.must(tb.expect().Locator(toCatalog).ToContainText("catalog"), "the job page links to %s in the catalog", model)
	tb.must(toCatalog.Click(), "following the link to the catalog")
	tb.must(tb.expect().Page(tb.page).ToHaveURL(regexp.MustCompile(`/catalog(#.*)?$`)), "on the catalog")
	row := tb.loc(fmt.Sprintf("[data-testid=model-row][data-model=%q]", model))
	tb.must(tb.expect().Locator(row).ToBeVisible(), "%s in the catalog", model)
	tb.must(tb.expect().Locator(row.Locator("[data-testid=origin]")).ToHaveText(repo), "%s's origin", model)
	tb.must(tb.expect().Locator(row.Locator("[data-testid=wanted]")).ToHaveText("1"), "%s wants one replica", model)

	// The fleet runs its replica, ready.
	tb.must(tb.page.GetByRole("link", playwright.PageGetByRoleOptions{Name: "Fleet", Exact: playwright.Bool(true)}).Click(), "opening the fleet")
	tb.must(tb.expect().Page(tb.page).ToHaveURL("/fleet"), "on the fleet page")
	tb.screenshot("fleet.png")
	replica := tb.loc("[data-testid=replicas] [data-testid=replica]").Filter(playwright.LocatorFilterOptions{HasText: model})
	tb.must(tb.expect().Locator(replica).ToHaveCount(1), "the fleet page lists one replica of %s", model)
	tb.must(tb.expect().Locator(replica.Locator("[data-label=State] [data-testid=state]")).ToHaveText(regexp.MustCompile(`\bready$`)), "the replica of %s shows ready", model)
	tb.must(tb.expect().Locator(replica.Locator("[data-testid=endpoint]")).ToContainText("http://127.0.0.1:"), "the replica of %s shows where it answers", model)
}

// changes counts the samples that differ from the one before.
func changes(ss []sample) int {
	n := 0
	for i := 1; i < len(ss); i++ {
		a, b := ss[i-1], ss[i]
		if a.Progress != b.Progress || fmt.Sprint(a.Steps) != fmt.Sprint(b.Steps) {
			n++
		}
	}
	return n
}

// TestLongestThatFitsIsOneClick: the serve form is filled with the default
// pool the API serves with, and the longest context that fits is offered
// beside it: one click puts it in the form, slots and all.
func TestLongestThatFitsIsOneClick(t *testing.T) {
	e := setup(t)
	const repo, set = "acme/Long-GGUF", "Long-Q4_K_M"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 65536}))

	tb := e.newTab(t)
	tb.open("/serve")
	tb.typeRepo(repo)
	row := tb.loc(fmt.Sprintf("[data-testid=set-row][data-set=%q]", set))
	tb.must(row.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Choose"}).Click(), "choosing %s", set)
	pool, slots := tb.loc("[data-testid=ctx-pool]"), tb.loc("[data-testid=slots]")
	tb.must(tb.expect().Locator(pool).ToHaveValue("16384"), "the form filled with the default pool")
	longest := tb.loc("[data-testid=longest]")
	want, err := longest.GetAttribute("data-fill-pool")
	tb.must(err, "reading the longest pool offered")
	wantSlots, err := longest.GetAttribute("data-fill-slots")
	tb.must(err, "reading the longest pool's slots")
	if n, _ := strconv.Atoi(want); n <= 16384 {
		t.Fatalf("the longest that fits is offered as %q tokens, not more than the default", want)
	}
	tb.must(longest.Click(), "taking the longest that fits")
	tb.must(tb.expect().Locator(pool).ToHaveValue(want), "the pool set to the longest that fits")
	tb.must(tb.expect().Locator(slots).ToHaveValue(wantSlots), "the slots set with it")
	n, _ := strconv.Atoi(want)
	k, _ := strconv.Atoi(wantSlots)
	tb.must(tb.expect().Locator(tb.loc("[data-testid=per-slot]")).ToHaveText(fmt.Sprintf("%s of %d tokens each", words.Count(k, "slot", "slots"), n/max(k, 1))),
		"the slots' sentence following the pool")
}

// TestThePlanFollowsTheTyping: on a machine of 2 GiB, a file whose KV cache
// takes 64 KiB a token fits at the pool the form is filled with and not at
// 65536 tokens. Typed, 65536 turns the bar, the chosen row, the "runs on"
// choice and the slots' sentence to it, and disables Serve with the reason
// beside it; typed back, Serve is enabled again.
func TestThePlanFollowsTheTyping(t *testing.T) {
	e := setup(t, "--local-memory", "2GiB")
	const repo, set = "acme/Wide-Cache-GGUF", "Wide-Cache-Q4_K_M"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 131072, BlockCount: 4, HeadCount: 4, HeadCountKV: 4, KeyLength: 1024, ValueLength: 1024}))

	tb := e.newTab(t)
	tb.open("/serve")
	tb.typeRepo(repo)
	row := tb.loc(fmt.Sprintf("[data-testid=set-row][data-set=%q]", set))
	tb.must(row.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Choose"}).Click(), "choosing %s", set)
	tb.must(tb.expect().Locator(tb.loc("[data-testid=chosen]")).ToHaveText(set), "the sizing for %s", set)
	submit, reason := tb.loc("[data-testid=serve-submit]"), tb.loc("[data-testid=serve-blocked]")
	fit, where, bar := row.Locator("[data-testid=fit]"), tb.loc("[data-testid=where]"), tb.loc("[data-testid=bar-text]").First()
	tb.must(tb.expect().Locator(submit).ToBeEnabled(), "Serve enabled at the pool the form is filled with")
	tb.must(tb.expect().Locator(fit).ToContainText("fits"), "the row says it fits")
	tb.must(tb.expect().Locator(fit).Not().ToContainText("does not fit"), "the row says it fits")
	slots, err := tb.loc("[data-testid=slots]").InputValue()
	tb.must(err, "reading the slots")
	k, _ := strconv.Atoi(slots)
	// The headline and the bar give the one figure the file needs, and
	// the reasons a file does not fit are not struck through.
	headline := tb.loc("[data-testid=reason]")
	barText, err := bar.InnerText()
	tb.must(err, "reading the bar")
	_, need, _ := strings.Cut(barText, " = ")
	need, _, _ = strings.Cut(need, " of ")
	tb.must(tb.expect().Locator(headline).ToContainText("fits: "+need+" with a "), "the headline giving the bar's %q", need)

	pool := tb.loc("[data-testid=ctx-pool]")
	tb.must(pool.Fill(""), "emptying the pool")
	tb.must(pool.PressSequentially("65536", playwright.LocatorPressSequentiallyOptions{Delay: playwright.Float(30)}), "typing 65536 tokens")
	tb.must(tb.expect().Locator(bar).ToContainText("too much"), "the bar says 65536 tokens do not fit")
	tb.must(tb.expect().Locator(bar).ToContainText("65536 tokens"), "the bar sizes the pool typed")
	tb.must(tb.expect().Locator(submit).ToBeDisabled(), "Serve disabled beside a bar that says too much")
	tb.must(tb.expect().Locator(reason).ToContainText("fits no node of the pool"), "the reason beside the disabled Serve")
	tb.must(tb.expect().Locator(fit).ToContainText("does not fit"), "the chosen row follows the pool typed")
	tb.must(tb.expect().Locator(headline).Not().ToContainText("fits:"), "the headline no longer saying the file fits")
	tb.must(tb.expect().Locator(headline).ToContainText("no file fits"), "the headline saying no file fits")
	struck, err := row.Locator(".fit-does-not-fit").First().Evaluate(`el => getComputedStyle(el).textDecorationLine`, nil)
	tb.must(err, "reading how the reason is drawn")
	if struck != "none" {
		t.Errorf("the reason the file does not fit is drawn with text-decoration %v: struck through, it is hard to read", struck)
	}
	tb.must(tb.expect().Locator(where.Locator("option").Nth(1)).ToContainText("does not fit"), "the places it runs follow the pool typed")
	tb.must(tb.expect().Locator(tb.loc("[data-testid=per-slot]")).ToHaveText(fmt.Sprintf("%s of %d tokens each", words.Count(k, "slot", "slots"), 65536/max(k, 1))),
		"the slots' sentence follows the pool typed")
	tb.screenshot("serve-too-much.png")

	tb.must(pool.Fill("4096"), "typing 4096 tokens")
	tb.must(tb.expect().Locator(submit).ToBeEnabled(), "Serve enabled again at a pool that fits")
	tb.must(tb.expect().Locator(reason).ToHaveCount(0), "no reason left once it fits")
	tb.must(tb.expect().Locator(bar).Not().ToContainText("too much"), "the bar says it fits")
	tb.must(tb.expect().Locator(fit).Not().ToContainText("does not fit"), "the row says it fits again")
	tb.must(tb.expect().Locator(headline).ToContainText("fits: "), "the headline saying it fits again")
}
