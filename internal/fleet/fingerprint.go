package fleet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

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
func Fingerprint(m catalog.Model) string {
	b, _ := json.Marshal(struct {
		Source   string
		Profiles []catalog.Profile
		Origin   *catalog.Origin
		Added    string
	}{m.Source, m.Profiles, m.Origin, m.AddedAt.UTC().String()})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
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
