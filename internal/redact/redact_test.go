package redact_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"modelserve/internal/auth"
	"modelserve/internal/redact"
	"modelserve/internal/testkit"
)

func TestTextTakesOutCredentials(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a bearer header echoed", `{"error":"bad header Authorization: Bearer hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}`,
			`{"error":"bad header Authorization: Bearer redacted"}`},
		{"a Hub token alone", "token hf_AbCdEfGhIjKlMnOp refused", "token redacted refused"},
		{"a secret key in a URL carried as text", "/jobs?page=2&access_token=abc123", "/jobs?page=2&access_token=redacted"},
		{"words are left alone", "the items_list of mishaps", "the items_list of mishaps"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := redact.Text(tc.in); got != tc.want {
				t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	if got := redact.Text("the mirror said s3cr3t-v4lue is wrong", "s3cr3t-v4lue"); strings.Contains(got, "s3cr3t") {
		t.Errorf("the configured token was kept: %q", got)
	}
}

// A token modelserve makes is recognised wherever it turns up, as its
// own shape rather than by the key it sits under.
func TestTextKnowsModelserveTokens(t *testing.T) {
	db := testkit.OpenDB(t)
	tok, err := auth.NewTokens(db).Create(context.Background(), "script")
	if err != nil {
		t.Fatal(err)
	}
	if got := redact.Text("/jobs?next=/catalog&x=" + tok); strings.Contains(got, tok) {
		t.Errorf("a modelserve token was kept: %q", got)
	}
}

func TestQuery(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"limit=5&token=hunter2", "limit=5&token=redacted"},
		{"next=%2Fjobs%3Ftoken%3Dhunter2", "next=%2Fjobs%3Ftoken%3Dredacted"},
		{"q=hf_AbCdEfGhIjKlMnOp", "q=redacted"},
		{"repo=a%2Fb&page=2", "repo=a%2Fb&page=2"},
	} {
		if got, ok := redact.Query(tc.in); !ok || got != tc.want {
			t.Errorf("Query(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
}

// FuzzRedact: whatever surrounds it, a Hub token, a bearer header's value
// or the configured token set apart by a space is never in what Text
// gives back, and a query's secret-named value never in what Query does;
// neither panics on any input.
func FuzzRedact(f *testing.F) {
	f.Add("error: ", " was refused", "token")
	f.Add("Authorization: Bearer", "\n", "access_token")
	f.Add("", "", "q")
	f.Add("%zz&", "=&;", "api_key")
	f.Fuzz(func(t *testing.T, before, after, key string) {
		const hub, own = "hf_AbCdEfGh0123", "s3cr3t-own-token"
		for _, s := range []string{before + " " + hub + " " + after, before + " Bearer " + own + " " + after, before + " " + own + " " + after} {
			if got := redact.Text(s, own); strings.Contains(got, hub) || strings.Contains(got, own) {
				t.Fatalf("Text(%q) = %q", s, got)
			}
		}
		raw := url.Values{key: {own}, "q": {before}}.Encode()
		if got, ok := redact.Query(raw); ok && redact.Key(key) && strings.Contains(got, own) {
			t.Fatalf("Query(%q) = %q", raw, got)
		}
		redact.Query(before + after)
	})
}
