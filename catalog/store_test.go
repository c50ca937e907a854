package catalog_test

import (
	"context"
	"database/sql"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/testkit"
)

// MustOpen opens a fresh database in a temporary directory, with every
// migration applied, and returns the catalog kept in it and the database.
func MustOpen(t *testing.T) (*catalog.Store, *sql.DB) {
	t.Helper()
	db := testkit.OpenDB(t)
	return catalog.NewStore(db), db
}

// MustAdd adds m, failing the test if the catalog refuses it.
func MustAdd(t *testing.T, s *catalog.Store, m catalog.Model) {
	t.Helper()
	if err := s.Add(context.Background(), m, "tester"); err != nil {
		t.Fatalf("Add(%s): %v", m.Name, err)
	}
}

// MustGet reads the model named name, failing the test if it is absent.
func MustGet(t *testing.T, s *catalog.Store, name string) catalog.Model {
	t.Helper()
	m, err := s.Get(context.Background(), name)
	if err != nil {
		t.Fatalf("Get(%s): %v", name, err)
	}
	return m
}

// MustBeAbsent fails the test unless the catalog has no model named name
// and no alias row pointing at it.
func MustBeAbsent(t *testing.T, s *catalog.Store, db *sql.DB, name string) {
	t.Helper()
	if _, err := s.Get(context.Background(), name); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("Get(%s) = %v, want ErrNotFound", name, err)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM aliases WHERE model = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d alias rows left for %s, want none", n, name)
	}
}

// MustHaveAliases fails the test unless the alias rows in the database are
// exactly want (alias -> model).
func MustHaveAliases(t *testing.T, db *sql.DB, want map[string]string) {
	t.Helper()
	rows, err := db.Query(`SELECT alias, model FROM aliases`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var a, m string
		if err := rows.Scan(&a, &m); err != nil {
			t.Fatal(err)
		}
		got[a] = m
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("alias rows = %v, want %v", got, want)
	}
}

// fullModel has every field of a Model and its parts set.
func fullModel() catalog.Model {
	return catalog.Model{
		Name:           "qwen3-guard-4b",
		Aliases:        []string{"guard", "judge-small"},
		Description:    "Qwen3Guard 4B, judging prompts and replies",
		Source:         "http://control:8080/mirror/qwen3-guard-4b/",
		RoutingProfile: "chat",
		ContextLength:  8192,
		MaxOutput:      2048,
		Profiles: []catalog.Profile{
			{
				Name: "gpu-2xa100", Engine: "vllm", Size: catalog.Size{Pool: 8192, Slots: 1},
				GPUClass: "a100", GPUsPerNode: 2, Nodes: 2, TP: 2, PP: 2, CardBytes: 40 << 30, RAMBytes: 4 << 30, CPUCores: 8,
				Env:      map[string]string{"NCCL_DEBUG": "INFO", "OMP_NUM_THREADS": "8"},
				Priority: 100, Weight: 3, StartupTimeout: 4 * time.Hour,
			},
			{
				Name: "cpu", Engine: "llamacpp", Size: catalog.Size{Pool: 8192, Slots: 1}, Judge: true,
				RAMBytes: 6 << 30, CPUCores: 4, Priority: 90, Weight: 1,
			},
		},
		Scaling:      catalog.Scaling{Min: 1, Max: 3, IdleAfter: 90 * time.Second},
		Capabilities: catalog.Capabilities{Vision: true, Tools: true, Embeddings: true},
		Origin: &catalog.Origin{
			Repo: "Qwen/Qwen3Guard-Gen-4B-GGUF", Revision: "0123456789abcdef0123456789abcdef01234567",
			Files: []catalog.OriginFile{{Path: "Qwen3Guard-Gen-4B-Q4_K_M.gguf", Bytes: 2_500_000_000, SHA256: strings.Repeat("ab", 32)}},
		},
		Role:  catalog.RoleGuard,
		Guard: &catalog.GuardModel{Format: catalog.GuardQwen3Guard},
		Class: catalog.ClassCritical,
	}
}

func TestRoundTrip(t *testing.T) {
	s, _ := MustOpen(t)
	want := fullModel()
	before := time.Now()
	MustAdd(t, s, want)
	after := time.Now()

	got := MustGet(t, s, want.Name)
	if got.AddedBy != "tester" {
		t.Errorf("AddedBy = %q, want the one who added it, tester", got.AddedBy)
	}
	if got.AddedAt.Before(before) || got.AddedAt.After(after) {
		t.Errorf("AddedAt = %v, want between %v and %v", got.AddedAt, before, after)
	}
	want.AddedBy, want.AddedAt = "tester", got.AddedAt
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Get returned\n%+v\nwant\n%+v", got, want)
	}

	list, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !reflect.DeepEqual(list[0], want) {
		t.Errorf("List returned\n%+v\nwant\n[%+v]", list, want)
	}
}

func TestAddNewRefusesATakenName(t *testing.T) {
	s, db := MustOpen(t)
	first := validModel("llama")
	first.Aliases = []string{"first"}
	MustAdd(t, s, first)

	second := validModel("llama")
	second.Description = "second"
	second.Aliases = []string{"second"}
	err := s.AddNew(context.Background(), second, "tester")
	if !errors.Is(err, catalog.ErrExists) {
		t.Fatalf("AddNew of a taken name = %v, want ErrExists", err)
	}
	if !strings.Contains(err.Error(), "llama") {
		t.Errorf("AddNew = %q, want it to name the model", err)
	}
	if got := MustGet(t, s, "llama"); got.Description != "" || !reflect.DeepEqual(got.Aliases, []string{"first"}) {
		t.Errorf("after a refused AddNew the model is %+v, want the first one unchanged", got)
	}
	MustHaveAliases(t, db, map[string]string{"first": "llama"})

	if err := s.AddNew(context.Background(), validModel("other"), "tester"); err != nil {
		t.Errorf("AddNew of a free name = %v, want nil", err)
	}
}

func TestAddReplaces(t *testing.T) {
	s, db := MustOpen(t)
	old := validModel("llama")
	old.Aliases = []string{"old", "kept"}
	old.Description = "old"
	if err := s.Add(context.Background(), old, "alice"); err != nil {
		t.Fatal(err)
	}

	// The new version may take its own old aliases again, in a new order.
	repl := validModel("llama")
	repl.Aliases = []string{"kept", "new"}
	repl.Description = "new"
	if err := s.Add(context.Background(), repl, "bob"); err != nil {
		t.Fatalf("Add over an existing model = %v, want it replaced", err)
	}
	got := MustGet(t, s, "llama")
	if got.Description != "new" || got.AddedBy != "bob" || !reflect.DeepEqual(got.Aliases, []string{"kept", "new"}) {
		t.Errorf("after replacing, got %+v, want the new version added by bob with aliases [kept new]", got)
	}
	MustHaveAliases(t, db, map[string]string{"kept": "llama", "new": "llama"})

	// The freed alias is anyone's.
	other := validModel("other")
	other.Aliases = []string{"old"}
	MustAdd(t, s, other)
}

func TestNameCollisions(t *testing.T) {
	tests := []struct {
		name string
		add  func() catalog.Model
		// mention is what the refusal must name: the contested name and
		// the model holding it.
		mention []string
	}{
		{"an alias that is another model's name",
			func() catalog.Model { m := validModel("b"); m.Aliases = []string{"a"}; return m },
			[]string{`alias a of b`, "another model"}},
		{"an alias that is another model's alias",
			func() catalog.Model { m := validModel("b"); m.Aliases = []string{"free", "a-alias"}; return m },
			[]string{"a-alias", "alias of a"}},
		{"a name that is another model's alias",
			func() catalog.Model { return validModel("a-alias") },
			[]string{"a-alias", "alias of a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, db := MustOpen(t)
			held := validModel("a")
			held.Aliases = []string{"a-alias"}
			MustAdd(t, s, held)

			m := tt.add()
			for _, add := range []func(context.Context, catalog.Model, string) error{s.Add, s.AddNew} {
				err := add(context.Background(), m, "tester")
				if !errors.Is(err, catalog.ErrInvalid) {
					t.Fatalf("adding %s = %v, want a refusal matching ErrInvalid", m.Name, err)
				}
				for _, want := range tt.mention {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("refusal %q does not mention %q", err, want)
					}
				}
			}
			// A failed Add leaves nothing: no model, no aliases, and the
			// holder as it was.
			MustBeAbsent(t, s, db, m.Name)
			MustHaveAliases(t, db, map[string]string{"a-alias": "a"})
			if got := MustGet(t, s, "a"); !reflect.DeepEqual(got.Aliases, []string{"a-alias"}) {
				t.Errorf("the holder's aliases are now %v, want [a-alias]", got.Aliases)
			}
		})
	}
}

func TestFailedReplaceLeavesTheOldVersion(t *testing.T) {
	s, db := MustOpen(t)
	MustAdd(t, s, validModel("other"))
	old := validModel("llama")
	old.Aliases = []string{"mine"}
	old.Description = "old"
	MustAdd(t, s, old)

	bad := validModel("llama")
	bad.Description = "new"
	bad.Aliases = []string{"fresh", "other"}
	if err := s.Add(context.Background(), bad, "tester"); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("Add with an alias that is another model's name = %v, want a refusal", err)
	}
	if got := MustGet(t, s, "llama"); got.Description != "old" || !reflect.DeepEqual(got.Aliases, []string{"mine"}) {
		t.Errorf("after a refused replacement, got %+v, want the old version", got)
	}
	MustHaveAliases(t, db, map[string]string{"mine": "llama"})
}

func TestInvalidAddLeavesNothing(t *testing.T) {
	s, db := MustOpen(t)
	m := validModel("llama")
	m.Aliases = []string{"ll"}
	m.Profiles[0].Env = map[string]string{"LD_PRELOAD": "/tmp/x.so"}
	if err := s.Add(context.Background(), m, "tester"); !errors.Is(err, catalog.ErrInvalid) {
		t.Fatalf("Add of an invalid model = %v, want a refusal", err)
	}
	MustBeAbsent(t, s, db, "llama")
	MustHaveAliases(t, db, map[string]string{})
}

// The database refuses an ambiguous name by itself, whatever writes to it.
func TestDatabaseKeepsNamesUnique(t *testing.T) {
	s, db := MustOpen(t)
	a := validModel("a")
	a.Aliases = []string{"a-alias"}
	MustAdd(t, s, a)
	MustAdd(t, s, validModel("b"))

	tests := []struct{ query, refusal string }{
		{`INSERT INTO aliases (alias, model, position) VALUES ('a-alias', 'b', 0)`, "UNIQUE constraint failed"},
		{`INSERT INTO aliases (alias, model, position) VALUES ('a', 'b', 0)`, "may not be the name of a model"},
		{`INSERT INTO models (name, added_at, spec) VALUES ('a-alias', '', '{}')`, "may not be an alias"},
		{`INSERT INTO aliases (alias, model, position) VALUES ('x', 'nobody', 0)`, "FOREIGN KEY constraint failed"},
	}
	for _, tt := range tests {
		_, err := db.Exec(tt.query)
		if err == nil || !strings.Contains(err.Error(), tt.refusal) {
			t.Errorf("%s = %v, want the database to refuse it: %s", tt.query, err, tt.refusal)
		}
	}
}

func TestRemove(t *testing.T) {
	s, db := MustOpen(t)
	m := validModel("llama")
	m.Aliases = []string{"ll"}
	MustAdd(t, s, m)
	MustAdd(t, s, validModel("other"))

	if err := s.Remove(context.Background(), "llama"); err != nil {
		t.Fatalf("Remove = %v", err)
	}
	MustBeAbsent(t, s, db, "llama")
	MustGet(t, s, "other")

	err := s.Remove(context.Background(), "llama")
	if !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("Remove of an absent model = %v, want ErrNotFound", err)
	}
	if !strings.Contains(err.Error(), `"llama"`) {
		t.Errorf("Remove = %q, want it to name the model", err)
	}
	if _, err := s.Get(context.Background(), "ll"); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("Get of a removed model's alias = %v, want ErrNotFound", err)
	}
	// Its alias is free again.
	n := validModel("new")
	n.Aliases = []string{"ll"}
	MustAdd(t, s, n)
}

func TestListIsSortedByName(t *testing.T) {
	s, _ := MustOpen(t)
	list, err := s.List(context.Background())
	if err != nil || len(list) != 0 {
		t.Fatalf("List of an empty catalog = %v, %v, want nothing", list, err)
	}
	for _, name := range []string{"qwen3", "gemma3", "llama3.1", "bge-m3"} {
		m := validModel(name)
		m.Aliases = []string{name + "-a", name + "-b"}
		MustAdd(t, s, m)
	}
	list, err = s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range list {
		names = append(names, m.Name)
		if want := []string{m.Name + "-a", m.Name + "-b"}; !reflect.DeepEqual(m.Aliases, want) {
			t.Errorf("List gives %s the aliases %v, want %v", m.Name, m.Aliases, want)
		}
	}
	if want := []string{"bge-m3", "gemma3", "llama3.1", "qwen3"}; !reflect.DeepEqual(names, want) {
		t.Errorf("List order = %v, want %v", names, want)
	}
}

func TestDefaultClassByRole(t *testing.T) {
	for _, tc := range []struct {
		m    catalog.Model
		want string
	}{
		{catalog.Model{}, catalog.ClassStandard},
		{catalog.Model{Role: catalog.RoleGuard}, catalog.ClassCritical},
		{catalog.Model{Role: catalog.RoleGuard, Class: catalog.ClassOpportunistic}, catalog.ClassOpportunistic},
		{catalog.Model{Class: catalog.ClassCritical}, catalog.ClassCritical},
	} {
		if got := tc.m.ClassOrDefault(); got != tc.want {
			t.Errorf("role %q class %q: %s, want %s", tc.m.Role, tc.m.Class, got, tc.want)
		}
	}
}
