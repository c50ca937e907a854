package catalog

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// Upgrade rewrites what a catalog stored before a model said how it runs
// in fields of its own. Profiles carried llama-server's arguments
// (--ctx-size, --parallel, ...) and one memory figure, which meant a
// node's RAM on the CPU, what each card holds for a model's first profile
// on cards, and all its cards together for its fallbacks; and which of a
// model's files were its weights and which its vision projector was told
// by their names ("mmproj"). Each such entry, in the catalog and in the
// versions kept of it, is read this one time and written back in the new
// fields, so the replicas start as they did. What is upgraded already is
// left alone: a second run changes nothing.
func Upgrade(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	n := 0
	for _, t := range []struct{ query, update string }{
		{`SELECT name, spec FROM models`, `UPDATE models SET spec = ? WHERE name = ?`},
		{`SELECT id, profile FROM model_versions WHERE profile <> ''`, `UPDATE model_versions SET profile = ? WHERE id = ?`},
	} {
		rows, err := tx.QueryContext(ctx, t.query)
		if err != nil {
			return err
		}
		type change struct{ key, doc string }
		var changes []change
		for rows.Next() {
			var key, doc string
			if err := rows.Scan(&key, &doc); err != nil {
				rows.Close()
				return err
			}
			up, changed, err := upgradeDoc(doc, t.query == `SELECT name, spec FROM models`)
			if err != nil {
				rows.Close()
				return fmt.Errorf("upgrade the stored profile of %s: %w", key, err)
			}
			if changed {
				changes = append(changes, change{key, up})
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, c := range changes {
			if _, err := tx.ExecContext(ctx, t.update, c.doc, c.key); err != nil {
				return err
			}
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return tx.Commit()
}

// legacyProfile is what a profile held before: only Upgrade reads it.
type legacyProfile struct {
	Args           []string `json:"args"`
	MinMemoryBytes int64    `json:"min_memory_bytes"`
	MinMemoryGB    int      `json:"min_memory_gb"`
}

// upgradeDoc upgrades a stored model (whole, with its profiles) or a
// version's one profile; changed is false when nothing was old.
func upgradeDoc(doc string, model bool) (string, bool, error) {
	var raw []json.RawMessage
	var m map[string]json.RawMessage
	if model {
		if err := json.Unmarshal([]byte(doc), &m); err != nil {
			return "", false, err
		}
		if len(m["profiles"]) > 0 {
			if err := json.Unmarshal(m["profiles"], &raw); err != nil {
				return "", false, err
			}
		}
	} else {
		raw = []json.RawMessage{json.RawMessage(doc)}
	}
	changed := false
	if model && m["weights"] == nil && m["origin"] != nil {
		if w, proj, ok := weightsOfOrigin(m["origin"]); ok {
			m["weights"], _ = json.Marshal(w)
			if proj != "" {
				m["projector"], _ = json.Marshal(proj)
			}
			changed = true
		}
	}
	for i, r := range raw {
		var old legacyProfile
		if err := json.Unmarshal(r, &old); err != nil {
			return "", false, err
		}
		if old.Args == nil && old.MinMemoryBytes == 0 && old.MinMemoryGB == 0 {
			continue
		}
		var p Profile
		if err := json.Unmarshal(r, &p); err != nil {
			return "", false, err
		}
		// A model's first profile is its priority's highest; a version
		// keeps the first.
		first := !model || i == 0
		p = upgradeProfile(p, old, first)
		b, err := json.Marshal(p)
		if err != nil {
			return "", false, err
		}
		raw[i], changed = b, true
	}
	if !changed {
		return doc, false, nil
	}
	if !model {
		return string(raw[0]), true, nil
	}
	if len(raw) > 0 {
		b, err := json.Marshal(raw)
		if err != nil {
			return "", false, err
		}
		m["profiles"] = b
	}
	out, err := json.Marshal(m)
	return string(out), true, err
}

// upgradeProfile is p with what old said in its fields. first says it was
// its model's first profile, whose memory on cards was what each card
// holds; a fallback's was all its cards together.
func upgradeProfile(p Profile, old legacyProfile, first bool) Profile {
	for i := 0; i < len(old.Args); i++ {
		value := func() int {
			if i+1 < len(old.Args) {
				n, _ := strconv.Atoi(old.Args[i+1])
				i++
				return n
			}
			return 0
		}
		switch old.Args[i] {
		case "--ctx-size", "-c":
			p.Pool = value()
		case "--parallel", "-np":
			p.Slots = value()
		case "--embedding", "--embeddings":
			p.Embeddings = true
		case "--cache-ram":
			if value() == 0 {
				p.Judge = true
			}
		}
	}
	if p.Pool > 0 {
		p.Slots = max(p.Slots, 1)
	}
	mem := old.MinMemoryBytes
	if mem <= 0 {
		mem = int64(old.MinMemoryGB) << 30
	}
	switch {
	case p.GPUClass == "":
		p.RAMBytes = mem
	case first:
		p.CardBytes = mem
	default:
		p.CardBytes = mem / int64(max(p.GPUsPerNode, 1))
	}
	return p
}

// weightsOfOrigin tells an older entry's weights from its projector by
// their names, as the fleets did before the catalog said: the file with
// "mmproj" in its name is the projector, the GGUF files the weights, in
// order (a split model's shards are numbered from 00001); a model of
// original weights loads all its files.
func weightsOfOrigin(origin json.RawMessage) (weights []string, projector string, ok bool) {
	var o Origin
	if json.Unmarshal(origin, &o) != nil || len(o.Files) == 0 {
		return nil, "", false
	}
	var all []string
	for _, f := range o.Files {
		base := strings.ToLower(path.Base(f.Path))
		switch {
		case strings.Contains(base, "mmproj"):
			projector = f.Path
		case strings.HasSuffix(base, ".gguf"):
			weights = append(weights, f.Path)
		}
		all = append(all, f.Path)
	}
	if len(weights) == 0 {
		weights, projector = all, ""
	}
	slices.Sort(weights)
	return weights, projector, true
}
