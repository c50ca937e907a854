//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"

	"modelserve/internal/ggufgen"
	"modelserve/internal/hubtest"
)

// TestEveryPageFitsItsBox: at 1280 and 375 px, no page scrolls sideways and
// no element is wider than the box it stands in (a table may scroll inside
// a box of its own, which says so by scrolling): a Remove column cut off, a
// file name breaking out of its cell, a button off screen.
func TestEveryPageFitsItsBox(t *testing.T) {
	e := setup(t)
	const repo, set = "acme/Wide-Tiny-Llama-With-A-Long-Name-GGUF", "Wide-Tiny-Llama-With-A-Long-Name-Q4_K_M"
	e.hub.AddRepo(repo, hubtest.RepoOptions{})
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 4096}))
	// A name whose words are joined by underscores, longer than a phone's
	// line: it must break at one of them.
	e.hub.AddFile(repo, "Wide_Tiny_Llama_With_A_Long_Name_In_Underscores-Q8_0.gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 4096}))
	tb := e.newTab(t)
	id := tb.serve(repo, set, "")
	if state := tb.waitEnded(jobLimit); state != "done" {
		t.Fatalf("the job ended %s", state)
	}
	model := "wide-tiny-llama-with-a-long-name"

	// A job refused at its plan, with what would fit offered.
	refused := e.refusedJob(t, "acme/Wide-Cache-With-A-Long-Name-GGUF", "Wide-Cache-With-A-Long-Name-Q4_K_M.gguf")
	// An update: the branch moved, its file's name and sums in the table.
	e.hub.AddFile(repo, set+".gguf", ggufgen.Bytes(ggufgen.Spec{ContextLength: 8192}))
	e.srv.api("POST", "/api/v1/catalog/"+model+"/check", nil, nil)
	// An eval suite with a long case beside the add-case form.
	e.srv.api("PUT", "/api/v1/catalog/"+model+"/evals", map[string]any{"cases": []map[string]any{{
		"name": "a-case-with-a-rather-long-name-that-does-not-break-by-itself", "prompt": strings.Repeat("Say the word ", 20) + "yes.",
		"expect": map[string]any{"regex": "(?i)yes"}}}}, nil)

	pages := []string{"/serve?repo=" + repo, "/serve?q=tiny", "/jobs", "/jobs/" + id, "/jobs/" + refused.ID, "/catalog", "/mirror", "/fleet",
		"/catalog/" + model + "/evals", "/catalog/" + model + "/playground", "/tokens", "/updates/1"}
	for _, w := range []int{1280, 375} {
		tb.must(tb.page.SetViewportSize(w, 900), "a window %d px wide", w)
		for _, path := range pages {
			tb.open(path)
			tb.fitsItsBox(path, w)
			tb.namesBreakBetweenWords(path, w)
		}
		// The pages hold what they were opened for: the refusal's offers,
		// the update's files, the suite's case.
		tb.open("/jobs/" + refused.ID)
		tb.must(tb.expect().Locator(tb.loc("[data-testid=offer]").First()).ToBeVisible(), "the refused job offers what fits")
		tb.open("/updates/1")
		tb.must(tb.expect().Locator(tb.loc("[data-testid=file]")).ToHaveCount(1), "the update's file listed")
		// Its table fits its box rather than scrolling in it: a file's sums
		// side by side were wider than the page.
		over, err := tb.page.Evaluate(`() => { const t = document.querySelector('[data-testid=files]'); return t.scrollWidth - t.parentElement.clientWidth; }`)
		tb.must(err, "measuring the update's files table")
		if n := toFloat(over); n > 1 {
			t.Errorf("the update's files table at %d px is %.0f px wider than its box", w, n)
		}
		// A new token, shown once, fits too.
		tb.open("/tokens")
		form := tb.loc("[data-testid=token-form]")
		tb.must(form.GetByLabel("Name").Fill("wide-"+strconv.Itoa(w)), "typing the token's name")
		tb.must(form.GetByRole("button", playwright.LocatorGetByRoleOptions{Name: "Make the token"}).Click(), "pressing Make the token")
		tb.must(tb.expect().Locator(tb.loc("[data-testid=new-token]")).ToBeVisible(), "the token shown")
		tb.fitsItsBox("/tokens, a token shown", w)
		// The search box: its button as tall as the input beside it, and
		// the hint under the input, not struck through by it.
		tb.open("/serve?q=tiny")
		raw, err := tb.page.Evaluate(`() => {
			const r = (s) => document.querySelector(s).getBoundingClientRect();
			const input = r('[data-testid=search-query]'), button = r('[data-testid=search-form] button'), hint = r('#search-help');
			return JSON.stringify({input: [input.top, input.bottom], button: [button.top, button.bottom], hint: hint.top});
		}`)
		tb.must(err, "measuring the search box")
		var box struct {
			Input, Button []float64
			Hint          float64
		}
		if err := json.Unmarshal([]byte(raw.(string)), &box); err != nil {
			t.Fatal(err)
		}
		if h, bh := box.Input[1]-box.Input[0], box.Button[1]-box.Button[0]; bh > h+2 || box.Hint < box.Input[1]-1 {
			t.Errorf("the search box at %d px: input %v, button %v, hint at %.0f: want the button beside the input, the hint under it", w, box.Input, box.Button, box.Hint)
			tb.screenshot("search-" + strconv.Itoa(w) + ".png")
		}
	}
}

// fitsItsBox fails for each element of the page's main wider than its
// parent's box, unless that parent scrolls it, and for a page that scrolls
// sideways.
func (tb *tab) fitsItsBox(path string, width int) {
	tb.t.Helper()
	out := tb.lines(`() => {
		const out = [];
		const doc = document.documentElement;
		if (doc.scrollWidth > doc.clientWidth + 1) out.push('the page scrolls sideways: ' + doc.scrollWidth + ' px in ' + doc.clientWidth);
		const name = (el) => el.tagName.toLowerCase() + (el.dataset.testid ? '[' + el.dataset.testid + ']' : '') +
			(el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : '');
		for (const el of document.querySelectorAll('main *')) {
			const p = el.parentElement;
			if (!p) continue;
			const r = el.getBoundingClientRect(), pr = p.getBoundingClientRect();
			if (r.width === 0 || r.height === 0) continue;
			// A box of a pixel is one hidden on purpose, read by screen
			// readers only (a table's headers when its rows are cards).
			if (pr.width <= 1 || pr.height <= 1) continue;
			const ox = getComputedStyle(p).overflowX;
			if (ox === 'auto' || ox === 'scroll' || ox === 'hidden') continue;
			// A few pixels over is a margin drawn past its box on purpose
			// (a nav's list); a cut-off column is more.
			if (r.right > pr.right + 12 || r.left < pr.left - 12) {
				out.push(name(el) + ' (' + Math.round(r.width) + ' px) in ' + name(p) + ' (' + Math.round(pr.width) + ' px): ' + (el.textContent || '').trim().slice(0, 40));
			}
			if (out.length > 12) break;
		}
		return JSON.stringify(out);
	}`, "measuring %s", path)
	if len(out) > 0 {
		tb.t.Errorf("%s at %d px:\n  %s", path, width, strings.Join(out, "\n  "))
		tb.screenshot(strings.Trim(strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(path), "-") + "-" + strconv.Itoa(width) + ".png")
	}
}

// namesBreakBetweenWords fails for a file name on the page that goes onto
// a new line inside a word ("Wide-Tiny-Lla" / "ma-…") rather than after
// one of its separators.
func (tb *tab) namesBreakBetweenWords(path string, width int) {
	tb.t.Helper()
	out := tb.lines(`() => {
		const out = [];
		// Names a person opens (a model's source) count too.
		document.querySelectorAll('main details').forEach((d) => { d.open = true; });
		const range = document.createRange();
		for (const el of document.querySelectorAll('main .file-name')) {
			const walk = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
			let top = null, prev = '', line = '';
			for (let n = walk.nextNode(); n; n = walk.nextNode()) {
				for (let i = 0; i < n.length; i++) {
					range.setStart(n, i);
					range.setEnd(n, i + 1);
					const rs = range.getClientRects();
					if (!rs.length) continue;
					if (top !== null && rs[0].top > top + 2 && !'-_./'.includes(prev)) {
						out.push(el.textContent + ': a line ends in a word, at "' + line + '"');
					}
					if (top === null || rs[0].top > top + 2) line = '';
					top = rs[0].top;
					prev = n.data[i];
					line += prev;
				}
			}
			if (out.length > 12) break;
		}
		return JSON.stringify(out);
	}`, "measuring the file names of %s", path)
	if len(out) > 0 {
		tb.t.Errorf("%s at %d px:\n  %s", path, width, strings.Join(out, "\n  "))
	}
}

// lines runs script, which returns a JSON list of strings, in the page.
func (tb *tab) lines(script, what string, args ...any) []string {
	tb.t.Helper()
	raw, err := tb.page.Evaluate(script)
	tb.must(err, what, args...)
	var out []string
	if err := json.Unmarshal([]byte(raw.(string)), &out); err != nil {
		tb.t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
	return out
}
