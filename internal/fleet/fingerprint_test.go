package fleet_test

import (
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
)

// writtenBefore is the fingerprint the Kubernetes fleet wrote on the pod
// template of the entry TestFingerprint starts from, before both fleets
// shared one: its Deployments carry it, and an upgrade must not roll them.
const writtenBefore = "25a526123080987d"

func TestFingerprint(t *testing.T) {
	base := catalog.Model{
		Name: "tiny", Source: "tiny/rev1/tiny.gguf", AddedAt: time.Date(2026, 3, 1, 12, 0, 0, 0, time.FixedZone("CET", 3600)),
		Origin:   &catalog.Origin{Repo: "org/tiny", Revision: "rev1"},
		Profiles: []catalog.Profile{{Name: "cpu", RAMBytes: 1 << 30}},
	}
	base.Scaling.Min = 1
	if got := fleet.Fingerprint(base); got != writtenBefore {
		t.Errorf("fingerprint %s, and the Kubernetes fleet wrote %s for the same entry: an upgrade would restart every replica", got, writtenBefore)
	}
	changed := func(change func(m *catalog.Model)) catalog.Model {
		m := base
		m.Profiles = append([]catalog.Profile(nil), base.Profiles...)
		change(&m)
		return m
	}
	for _, c := range []struct {
		name    string
		m       catalog.Model
		restart bool
	}{
		{"the same entry", changed(func(*catalog.Model) {}), false},
		{"another max and min", changed(func(m *catalog.Model) { m.Scaling.Max, m.Scaling.Min = 4, 0 }), false},
		{"another description", changed(func(m *catalog.Model) { m.Description = "small" }), false},
		{"the same time in another zone", changed(func(m *catalog.Model) { m.AddedAt = m.AddedAt.UTC() }), false},
		{"other weights", changed(func(m *catalog.Model) { m.Source = "tiny/rev2/tiny.gguf" }), true},
		{"another revision", changed(func(m *catalog.Model) { m.Origin = &catalog.Origin{Repo: "org/tiny", Revision: "rev2"} }), true},
		{"another profile size", changed(func(m *catalog.Model) { m.Profiles[0].RAMBytes = 2 << 30 }), true},
		{"served again", changed(func(m *catalog.Model) { m.AddedAt = m.AddedAt.Add(time.Second) }), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := fleet.Fingerprint(c.m) != fleet.Fingerprint(base); got != c.restart {
				t.Errorf("replaced: %v, want %v", got, c.restart)
			}
		})
	}
}
