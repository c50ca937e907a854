package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"

	"modelserve/catalog"
)

// Fingerprint names what a replica of m runs: a replica started from
// another fingerprint is replaced (drained, then stopped), and a park is
// for one fingerprint. Both fleets decide a restart by it; each had its
// own, with different fields.
//
// In it are what changes what the engine runs: the weights (Source, and
// Origin: the revision and files fetched), and the profiles (the engine,
// its arguments, sizes, environment and hardware). And when the model was
// added: serving a model again is asking for a fresh start, whose replicas
// replace those of before and inherit no park. Not in it are scaling,
// class, names and descriptions, which change nothing in a running engine.
//
// It is short and stable (a hash, not the entry): the Kubernetes fleet
// writes it on every pod template (a changed value rolls the pods), and
// it is the value that fleet wrote before both shared it, so its
// Deployments are not restarted by an upgrade.
func Fingerprint(m catalog.Model) string { return fingerprinted(m).fingerprint() }

// runs is what of a catalog entry its Fingerprint is of; its encoding
// is the fingerprint's, so its fields keep their names.
type runs struct {
	Source   string
	Profiles []catalog.Profile
	Origin   *catalog.Origin
	Added    string
}

func fingerprinted(m catalog.Model) runs {
	return runs{m.Source, m.Profiles, m.Origin, m.AddedAt.UTC().String()}
}

func (r runs) fingerprint() string {
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// fingerprints are the Fingerprints of the catalog's entries as the
// fleet's loop last read it, each computed once per version of its entry:
// an entry read again the same keeps its fingerprint, rather than every
// pass encoding and hashing every model again. The loop's own.
type fingerprints map[string]fingerprintOf

type fingerprintOf struct {
	runs runs
	fp   string
}

// update takes the catalog as just read: an entry new, or whose runs
// differ from the last read's, is fingerprinted afresh (comparing is a
// tenth of encoding and hashing); those gone are forgotten.
func (fps fingerprints) update(listed []catalog.Model) {
	seen := make(map[string]bool, len(listed))
	for _, m := range listed {
		seen[m.Name] = true
		r := fingerprinted(m)
		if old, ok := fps[m.Name]; ok && reflect.DeepEqual(old.runs, r) {
			continue
		}
		fps[m.Name] = fingerprintOf{runs: r, fp: r.fingerprint()}
	}
	for name := range fps {
		if !seen[name] {
			delete(fps, name)
		}
	}
}

// of is m's Fingerprint, m being an entry of the catalog as last read
// (update); one not in it is fingerprinted now.
func (fps fingerprints) of(m catalog.Model) string {
	if e, ok := fps[m.Name]; ok {
		return e.fp
	}
	return Fingerprint(m)
}

// Runner is a backend whose replicas run more than their catalog entry
// says: a cluster's pods also run its images, and a priority class of
// their model's class. Runs is that more for a replica of m, "" for
// nothing more; a replica started with other runs is replaced, drained,
// as one of a changed entry is.
type Runner interface {
	Runs(m catalog.Model) string
}

// runsOf is what a replica of m runs (Placement.Fingerprint): its
// entry's Fingerprint, and what more its backend runs it with (Runner).
// A replica whose runs differ is replaced.
func (f *Fleet) runsOf(m catalog.Model) string {
	fp := f.fps.of(m)
	if r, ok := f.backend.(Runner); ok {
		if more := r.Runs(m); more != "" {
			return fp + "+" + more
		}
	}
	return fp
}

// localFingerprint is the form this fleet used before Fingerprint, which
// parks kept in the database were keyed by (parkKey): a park from before
// an upgrade still holds.
func localFingerprint(m catalog.Model) string {
	b, _ := json.Marshal(struct {
		Source   string
		Profiles []catalog.Profile
		Origin   *catalog.Origin
	}{m.Source, m.Profiles, m.Origin})
	return string(b)
}
