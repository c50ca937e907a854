package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestTokenCreateWithLimits(t *testing.T) {
	dir := madeDataDir(t)
	ctx := context.Background()
	env := func(string) string { return "" }
	var out, errb bytes.Buffer
	for _, args := range [][]string{
		{"token", "create", "--data", dir, "--models", "tiny, embed", "app"},
		{"token", "create", "--data", dir, "--scope", "gateway", "clients"},
		{"token", "create", "--data", dir, "admin"},
	} {
		if err := run(ctx, args, env, nil, &out, &errb); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	out.Reset()
	if err := run(ctx, []string{"token", "list", "--data", dir}, env, nil, &out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SCOPE", "app      gateway  tiny,embed", "clients  gateway  all", "admin    all      all"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("token list lacks %q:\n%s", want, out.String())
		}
	}
	err := run(ctx, []string{"token", "create", "--data", dir, "--scope", "root", "x"}, env, nil, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `"root" is not a token scope`) {
		t.Errorf("a bad scope: %v", err)
	}
}
