package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
)

func TestParseIdleAfter(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       time.Duration
	}{
		{"seconds", "30s", 30 * time.Second},
		{"minutes", "15m", 15 * time.Minute},
		{"spaces around it", " 2h ", 2 * time.Hour},
		{"the shortest", "1s", time.Second},
		{"the longest", "168h", 168 * time.Hour},
		{"0 is the default", "0", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := catalog.ParseIdleAfter(tc.text)
			if err != nil || got != tc.want {
				t.Errorf("ParseIdleAfter(%q) = %v, %v; want %v", tc.text, got, err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, text string }{
		{"empty", ""},
		{"no unit", "30"},
		{"not a duration", "soon"},
		{"below a second", "500ms"},
		{"above a week", "169h"},
		{"negative", "-5m"},
		{"0 with a unit is below a second", "0s"},
	} {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			_, err := catalog.ParseIdleAfter(tc.text)
			if !errors.Is(err, catalog.ErrInvalid) {
				t.Fatalf("ParseIdleAfter(%q) = %v, want ErrInvalid", tc.text, err)
			}
			for _, part := range []string{"idle_after", "from 1s to 168h", "0 for the default of 15m", `not "` + tc.text + `"`} {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("refusal %q does not say %q", err, part)
				}
			}
		})
	}
}

func TestSetScalingSetsIdleAfterInTheSameEdit(t *testing.T) {
	ctx := context.Background()
	s, _ := MustOpen(t)
	MustAdd(t, s, validModel("lazy"))
	added := MustGet(t, s, "lazy").AddedAt
	dur := func(d time.Duration) *time.Duration { return &d }

	steps := []struct {
		name     string
		min, max int
		idle     *time.Duration
		want     catalog.Scaling
	}{
		{"bounds and idle time at once", 0, 3, dur(30 * time.Second), catalog.Scaling{Min: 0, Max: 3, IdleAfter: 30 * time.Second}},
		{"idle time left out is kept", 1, 2, nil, catalog.Scaling{Min: 1, Max: 2, IdleAfter: 30 * time.Second}},
		{"0 returns it to the default", 0, 2, dur(0), catalog.Scaling{Min: 0, Max: 2}},
	}
	for _, st := range steps {
		if err := s.SetScaling(ctx, "lazy", st.min, st.max, st.idle); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		m := MustGet(t, s, "lazy")
		if m.Scaling != st.want {
			t.Errorf("%s: scaling %+v, want %+v", st.name, m.Scaling, st.want)
		}
		if !m.AddedAt.Equal(added) {
			t.Errorf("%s: added at %v, was %v: a scaling is an edit, not a new entry", st.name, m.AddedAt, added)
		}
	}

	if err := s.SetScaling(ctx, "lazy", 0, 2, dur(45*time.Second)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		min, max int
		idle     time.Duration
		says     string
	}{
		{"below a second", 0, 4, 500 * time.Millisecond, "from 1s to 168h"},
		{"above a week", 0, 4, 200 * time.Hour, "not 200h"},
		{"with bounds refused", 3, 1, time.Minute, "fewer than the 3 it keeps"},
	} {
		err := s.SetScaling(ctx, "lazy", tc.min, tc.max, &tc.idle)
		if !errors.Is(err, catalog.ErrInvalid) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: SetScaling = %v, want ErrInvalid saying %q", tc.name, err, tc.says)
		}
		if got := MustGet(t, s, "lazy").Scaling; got != (catalog.Scaling{Min: 0, Max: 2, IdleAfter: 45 * time.Second}) {
			t.Errorf("%s: a refused scaling changed the entry to %+v", tc.name, got)
		}
	}
}

func TestIdleAfterReadsAsADuration(t *testing.T) {
	ctx := context.Background()
	s, db := MustOpen(t)
	m := validModel("lazy")
	m.Scaling.IdleAfter = 90 * time.Second
	MustAdd(t, s, m)

	// What the API answers and what is stored: a duration people read.
	b, err := json.Marshal(MustGet(t, s, "lazy"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"scaling":{"min":0,"max":1,"idle_after":"1m30s"}`) {
		t.Errorf("the entry's JSON is %s, want its idle_after as \"1m30s\"", b)
	}
	var spec string
	if err := db.QueryRow(`SELECT spec FROM models WHERE name = 'lazy'`).Scan(&spec); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(spec, `"idle_after":"1m30s"`) {
		t.Errorf("stored spec %s, want idle_after as \"1m30s\"", spec)
	}
	// The default is left out, as before.
	if b, _ := json.Marshal(catalog.Scaling{Min: 0, Max: 1}); string(b) != `{"min":0,"max":1}` {
		t.Errorf("a default idle time marshals as %s, want it left out", b)
	}

	// An entry stored before, with idle_after in nanoseconds, still reads.
	if _, err := db.Exec(`UPDATE models SET spec = json_set(spec, '$.scaling.idle_after', 30000000000) WHERE name = 'lazy'`); err != nil {
		t.Fatal(err)
	}
	if got := MustGet(t, s, "lazy").Scaling.IdleAfter; got != 30*time.Second {
		t.Errorf("an entry stored in nanoseconds reads as idle after %v, want 30s", got)
	}
	// And is written back as a duration by the next edit.
	if err := s.SetScaling(ctx, "lazy", 0, 2, nil); err != nil {
		t.Fatal(err)
	}
	if got := MustGet(t, s, "lazy").Scaling; got != (catalog.Scaling{Min: 0, Max: 2, IdleAfter: 30 * time.Second}) {
		t.Errorf("after an edit the entry scales %+v, want 0 to 2, idle after 30s", got)
	}
}
