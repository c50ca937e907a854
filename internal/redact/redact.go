// Package redact takes secrets out of what modelserve writes down or
// sends on: a log line, an error from a registry, the page a visitor is
// sent back to after signing in.
//
// A secret reaches these by mistake: a token put in a URL's query
// (MODELSERVE_URL with ?token=), a registry whose error echoes the
// Authorization header it was sent. Each place used to know its own few
// key names, or none; a registry's error put "Bearer hf_…" in three log
// lines, and a token in a URL went through the sign-in redirect into the
// access log. Whatever is written down or carried on asks this package.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mark stands where a secret was.
const Mark = "redacted"

// Key says whether a query key may name a secret: token, access_token,
// api_key, password, csrf, signature, session, code and their kin.
func Key(k string) bool {
	k = strings.ToLower(k)
	for _, s := range []string{"token", "key", "pass", "secret", "auth", "csrf", "sig", "credential", "session", "code"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

// tokens are what a credential looks like wherever it turns up: the
// value of a bearer header, a Hub token (hf_ and letters), a modelserve
// API token (ms_ and 43 characters of base64, internal/auth), and a
// secret key's value in a query written out as text ("/jobs?token=…"
// carried in another URL's next).
var tokens = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`(?i)\b(bearer|basic)(\s+|%20|\+)[^\s"'&,;]+`), "${1} " + Mark},
	{regexp.MustCompile(`\b(hf|ms|api_org)_[A-Za-z0-9_-]{8,}`), Mark},
	{regexp.MustCompile(`(?i)([?&;]|^)([a-z_.-]*(token|key|pass|secret|auth|csrf|sig|credential|session|code)[a-z_.-]*)=[^&\s"']*`), "${1}${2}=" + Mark},
}

// Text is s with whatever looks like a credential replaced by Mark, and
// each of known (the configured token itself, which may look like
// anything) too.
func Text(s string, known ...string) string {
	for _, k := range known {
		if len(k) >= 4 {
			s = strings.ReplaceAll(s, k, Mark)
		}
	}
	for _, t := range tokens {
		s = t.re.ReplaceAllString(s, t.with)
	}
	return s
}

// Query is a URL's raw query with the values of secret keys, and whatever
// looks like a credential in any other value, replaced by Mark; raw as it
// is when there is none. ok is false when the query does not parse, and
// must then be left out whole.
func Query(raw string) (string, bool) {
	q, err := url.ParseQuery(raw)
	if err != nil {
		return "", false
	}
	changed := false
	for k, vs := range q {
		for i, v := range vs {
			if Key(k) {
				vs[i] = Mark
			} else {
				vs[i] = Text(v)
			}
			changed = changed || vs[i] != v
		}
	}
	if !changed {
		return raw, true
	}
	return q.Encode(), true
}
