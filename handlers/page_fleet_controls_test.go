package handlers_test

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/catalog"
	"modelserve/handlers"
	"modelserve/internal/operr"
)

// fakeControls records what the operator asked of the fleet, and refuses
// what the real fleet refuses: a replica or model it does not have, a
// model that is not parked.
type fakeControls struct {
	f      *fakeFleet
	mu     sync.Mutex
	called []string
}

var _ handlers.FleetControls = (*fakeControls)(nil)

func (c *fakeControls) replica(id string) error {
	for _, r := range c.f.replicas {
		if r.ID == id {
			return nil
		}
	}
	return operr.New(operr.NotFound, "the fleet has no replica named %s", operr.Quote(id))
}

func (c *fakeControls) record(what string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.called = append(c.called, what)
}

func (c *fakeControls) calls() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.called)
}

func (c *fakeControls) Stop(id string) error {
	if err := c.replica(id); err != nil {
		return err
	}
	c.record("stop " + id)
	return nil
}

func (c *fakeControls) Restart(id string) error {
	if err := c.replica(id); err != nil {
		return err
	}
	c.record("restart " + id)
	return nil
}

func (c *fakeControls) Unpark(_ context.Context, model string) error {
	for _, h := range c.f.models {
		if h.Model == model && h.Parked {
			c.record("unpark " + model)
			return nil
		}
		if h.Model == model {
			return operr.New(operr.Conflict, "%s is not parked", model)
		}
	}
	return operr.New(operr.NotFound, "the fleet has no model named %s", operr.Quote(model))
}

// controlledEnv is a console over busyFleet with its controls, and tiny
// and broken in the catalog.
func controlledEnv(t *testing.T) (*consoleEnv, *fakeControls) {
	t.Helper()
	f := busyFleet()
	c := &fakeControls{f: f}
	e := newConsoleEnv(t, func(d *handlers.Deps) { d.Fleet, d.Controls = f, c })
	for _, n := range []string{"tiny", "broken"} {
		if err := e.catalog.Add(context.Background(), tinyModel(n), "test"); err != nil {
			t.Fatal(err)
		}
	}
	return e, c
}

func TestFleetPageOffersTheControls(t *testing.T) {
	e, c := controlledEnv(t)
	b := e.signedIn()
	doc := mustStatus(t, b.get("/fleet"), http.StatusOK)

	// Each control is a real form with the session's token: it works
	// without JavaScript.
	for _, tt := range []struct{ sel, action string }{
		{`[data-replica="tiny-1"] [data-testid="stop"]`, "/fleet/replicas/tiny-1/stop"},
		{`[data-replica="tiny-1"] [data-testid="restart"]`, "/fleet/replicas/tiny-1/restart"},
		{`[data-model="broken"] [data-testid="unpark"]`, "/fleet/models/broken/unpark"},
		{`[data-model="tiny"] [data-testid="scale-submit"]`, "/fleet/models/tiny/scale"},
	} {
		form := doc.Find(tt.sel).Closest("form")
		if form.AttrOr("action", "") != tt.action || form.AttrOr("method", "") != "post" {
			t.Errorf("%s: form %q %q, want a POST to %s", tt.sel, form.AttrOr("method", ""), form.AttrOr("action", ""), tt.action)
		}
		if form.Find(`input[name="csrf"]`).AttrOr("value", "") != b.csrf {
			t.Errorf("%s: the form carries no CSRF token", tt.sel)
		}
	}
	if doc.Find(`[data-model="tiny"] [data-testid="unpark"]`).Length() != 0 {
		t.Error("a model that is not parked is offered Unpark")
	}
	if got := doc.Find(`[data-model="tiny"] [data-testid="scale-min"]`).AttrOr("value", ""); got != "1" {
		t.Errorf("tiny's scale form keeps %q, want the catalog's 1", got)
	}
	if doc.Find(`[sse-connect="/fleet/stream"]`).Length() != 1 {
		t.Error("the fleet page does not follow its stream")
	}

	t.Run("stop", func(t *testing.T) {
		resp := b.post("/fleet/replicas/tiny-1/stop", nil)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("stop: %s", resp.Status)
		}
		where := resp.Header.Get("Location")
		resp.Body.Close()
		if !slices.Contains(c.calls(), "stop tiny-1") {
			t.Fatalf("the fleet was not asked: %q", c.calls())
		}
		notice := mustStatus(t, b.get(where), http.StatusOK).Find(`[data-testid="notice"]`).Text()
		if !strings.HasPrefix(notice, "tiny-1 is stopping.") || !strings.Contains(notice, "scale the model down") {
			t.Errorf("after stopping, the page says %q", notice)
		}
	})
	t.Run("without the token", func(t *testing.T) {
		resp := b.post("/fleet/replicas/tiny-1/restart", url.Values{"csrf": {"forged"}})
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || slices.Contains(c.calls(), "restart tiny-1") {
			t.Errorf("a forged restart: %s, calls %q", resp.Status, c.calls())
		}
	})
	t.Run("on demand, the form and the catalog say the same most", func(t *testing.T) {
		resp := b.post("/fleet/models/tiny/scale", url.Values{"min": {"0"}, "max": {"0"}})
		resp.Body.Close()
		fleetMax := mustStatus(t, b.get("/fleet"), http.StatusOK).Find(`[data-model="tiny"] [data-testid="scale-max"]`).AttrOr("value", "")
		wanted := strings.TrimSpace(mustStatus(t, b.get("/catalog"), http.StatusOK).Find(`[data-model="tiny"] [data-testid="wanted"]`).Text())
		if fleetMax != "1" || !strings.Contains(wanted, "up to 1") {
			t.Errorf("on demand with no maximum: the fleet's form says up to %q, the catalog %q; want both 1, as the fleet runs", fleetMax, wanted)
		}
	})
	t.Run("scale", func(t *testing.T) {
		resp := b.post("/fleet/models/tiny/scale", url.Values{"min": {"2"}, "max": {"4"}})
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("scale: %s", resp.Status)
		}
		m, err := e.catalog.Get(context.Background(), "tiny")
		if err != nil || m.Scaling.Min != 2 || m.Scaling.Max != 4 {
			t.Errorf("tiny scales %+v, %v; want 2 to 4", m.Scaling, err)
		}
		msg := mustStatus(t, b.post("/fleet/models/tiny/scale", url.Values{"min": {"3"}, "max": {"1"}}), http.StatusBadRequest)
		if got := msg.Find(`[data-testid="message"] p`).First().Text(); !strings.Contains(got, "fewer than the 3 it keeps") {
			t.Errorf("a maximum below the minimum says %q", got)
		}
		if got := msg.Find(`[data-testid="message"] a`).AttrOr("href", ""); got != "/fleet" {
			t.Errorf("the refusal leads to %q, want back to the fleet", got)
		}
		// From the page, the sentence goes just after tiny's scale form,
		// the page left as it was, rather than a "Not done" page.
		// The form is boosted, as every form of the page.
		resp = b.do(http.MethodPost, "/fleet/models/tiny/scale", url.Values{"min": {"3"}, "max": {"x"}, "csrf": {b.csrf}}, []string{"HX-Request", "true", "HX-Boosted", "true"})
		if got := resp.Header.Get("HX-Retarget"); got != `form[action="/fleet/models/tiny/scale"]` || resp.Header.Get("HX-Reswap") != "afterend" {
			t.Errorf("a refused scale from the page is put at %q (%q), want just after tiny's scale form", got, resp.Header.Get("HX-Reswap"))
		}
		if got := resp.Header.Get("HX-Push-Url"); got != "false" {
			t.Errorf("a refused scale puts its address in the history (HX-Push-Url %q)", got)
		}
		inline := mustStatus(t, resp, http.StatusBadRequest)
		if inline.Find(`[data-testid="message"], main, nav`).Length() != 0 {
			t.Error("a refused scale from the page is answered with a page")
		}
		if got := inline.Find(`[data-testid="scale-error"][data-model="tiny"][role="alert"]`).Text(); got != `the most replicas to run is a whole number, 0 or more, not "x"` {
			t.Errorf("the refusal beside the form says %q", got)
		}
		// A second refusal takes the place of the first (out of band).
		if inline.Find(`#scale-error-tiny[hx-swap-oob="delete"]`).Length() != 1 {
			t.Error("a second refusal would stack under the first")
		}
		// The form it is put after is the page's.
		page := mustStatus(t, b.get("/fleet"), http.StatusOK)
		if page.Find(`form[action="/fleet/models/tiny/scale"]`).Length() != 1 {
			t.Error("the fleet page has no form the refusal can be put after")
		}
	})
	t.Run("idle after", func(t *testing.T) {
		ctx := context.Background()
		idleField := func() *goquery.Selection {
			return mustStatus(t, b.get("/fleet"), http.StatusOK).Find(`[data-model="tiny"] [data-testid="scale-idle-after"]`)
		}
		if f := idleField(); f.AttrOr("value", "x") != "" || f.AttrOr("placeholder", "") != "15m (default)" {
			t.Errorf("with the default the field holds %q (placeholder %q), want empty, saying 15m (default)", f.AttrOr("value", "x"), f.AttrOr("placeholder", ""))
		}
		scale := func(form url.Values) {
			t.Helper()
			resp := b.post("/fleet/models/tiny/scale", form)
			resp.Body.Close()
			if resp.StatusCode != http.StatusSeeOther {
				t.Fatalf("scale %v: %s", form, resp.Status)
			}
		}
		idle := func() time.Duration {
			t.Helper()
			m, err := e.catalog.Get(ctx, "tiny")
			if err != nil {
				t.Fatal(err)
			}
			return m.Scaling.IdleAfter
		}

		scale(url.Values{"min": {"0"}, "max": {"2"}, "idle_after": {"90s"}})
		if got := idle(); got != 90*time.Second {
			t.Errorf("tiny is idle after %v, want the 90s asked", got)
		}
		if got := idleField().AttrOr("value", ""); got != "1m30s" {
			t.Errorf("the form shows an idle time of %q, want the catalog's 1m30s", got)
		}
		// A form without the field (an older page) leaves it be.
		scale(url.Values{"min": {"0"}, "max": {"3"}})
		if got := idle(); got != 90*time.Second {
			t.Errorf("a form without idle_after made it %v, want it left at 90s", got)
		}
		msg := mustStatus(t, b.post("/fleet/models/tiny/scale", url.Values{"min": {"1"}, "max": {"1"}, "idle_after": {"soon"}}), http.StatusBadRequest)
		if got := msg.Find(`[data-testid="message"] p`).First().Text(); !strings.Contains(got, "idle_after is a duration from 1s to 168h") {
			t.Errorf("an idle time that is no duration says %q", got)
		}
		if m, _ := e.catalog.Get(ctx, "tiny"); m.Scaling != (catalog.Scaling{Min: 0, Max: 3, IdleAfter: 90 * time.Second}) {
			t.Errorf("a refused idle time changed the scaling to %+v", m.Scaling)
		}
		// Emptied, it is the default again.
		scale(url.Values{"min": {"0"}, "max": {"3"}, "idle_after": {""}})
		if got := idle(); got != 0 {
			t.Errorf("an emptied idle time is %v, want the default (0)", got)
		}
	})
	t.Run("unpark", func(t *testing.T) {
		resp := b.post("/fleet/models/broken/unpark", nil)
		resp.Body.Close()
		if resp.StatusCode != http.StatusSeeOther || !slices.Contains(c.calls(), "unpark broken") {
			t.Errorf("unpark: %s, calls %q", resp.Status, c.calls())
		}
	})
}

func TestControlsWithoutAFleet(t *testing.T) {
	e := newConsoleEnv(t)
	resp, b := newAPIClient(t, e).do(http.MethodPost, "/api/v1/replicas/tiny-1/stop", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), "runs no fleet") {
		t.Errorf("stop without a fleet: %s %s", resp.Status, b)
	}
}
