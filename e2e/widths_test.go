//go:build e2e

package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

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
	tb := e.newTab(t)
	id := tb.serve(repo, set, "")
	if state := tb.waitEnded(jobLimit); state != "done" {
		t.Fatalf("the job ended %s", state)
	}
	model := "wide-tiny-llama-with-a-long-name"
	pages := []string{"/serve?repo=" + repo, "/serve?q=tiny", "/jobs", "/jobs/" + id, "/catalog", "/mirror", "/fleet",
		"/catalog/" + model + "/evals", "/catalog/" + model + "/playground"}
	for _, w := range []int{1280, 375} {
		tb.must(tb.page.SetViewportSize(w, 900), "a window %d px wide", w)
		for _, path := range pages {
			tb.open(path)
			tb.fitsItsBox(path, w)
		}
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
	raw, err := tb.page.Evaluate(`() => {
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
	}`)
	tb.must(err, "measuring %s", path)
	var out []string
	if err := json.Unmarshal([]byte(raw.(string)), &out); err != nil {
		tb.t.Fatal(err)
	}
	if len(out) > 0 {
		tb.t.Errorf("%s at %d px:\n  %s", path, width, strings.Join(out, "\n  "))
		tb.screenshot(strings.Trim(strings.NewReplacer("/", "-", "?", "-", "=", "-").Replace(path), "-") + "-" + strconv.Itoa(width) + ".png")
	}
}
