package gateway

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestMembersAsEncodingJSON: a request body's members are what
// encoding/json reads, and what is not one JSON object is refused.
func TestMembersAsEncodingJSON(t *testing.T) {
	for _, body := range []string{
		`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`,
		` { "model" : "tiny" , "n" : -1.5e3 , "ok" : true , "none" : null , "t" : false } `,
		"{\n\t\"model\":\"a\\\"b\",\r\n\"s\":\"}{][,:\\\\\"}\n",
		`{"mo\u0064el":"escaped name","nested":{"a":[1,{"b":"]"}],"c":{}},"empty":[],"e":{}}`,
		`{"model":"first","model":"last"}`,
		`{}`,
		`{"unicode":"héllo ☃","model":"x"}`,
	} {
		got, ok := members([]byte(body))
		var want map[string]json.RawMessage
		if err := json.Unmarshal([]byte(body), &want); err != nil || !ok {
			t.Fatalf("%s: members ok %v, encoding/json %v", body, ok, err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: members %q; want %q", body, got, want)
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Errorf("%s: member %s is %s; want %s", body, k, got[k], v)
			}
		}
	}
	for _, body := range []string{``, `null`, `[1]`, `"x"`, `{"model":}`, `{"model":"x"} {}`, `{"model":"x"`, `{"a" "b"}`} {
		if got, ok := members([]byte(body)); ok {
			t.Errorf("%q: members %q; want it refused", body, got)
		}
	}
}

// FuzzMembers: members takes a body exactly when encoding/json finds it
// one JSON object, and finds the members it finds.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{"model":"tiny","messages":[{"role":"user","content":"hi"}]}`, `{"a":-0.5e+3,"b":[true,false,null,{}],"c":"\u00e9\n"}`,
		`{"a":01}`, `{"a":"x` + "\x01" + `"}`, `{"a":"\x"}`, `{"a":[1,]}`, `{"a":1.}`, `{"a":1e}`, `{"a":tru}`, ` {} `, `{"a":1}x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := members(body)
		var want map[string]json.RawMessage
		err := json.Unmarshal(body, &want)
		if ok != (err == nil && want != nil) {
			t.Fatalf("%q: members ok %v; encoding/json %v", body, ok, err)
		}
		if !ok || !utf8.Valid(body) {
			return
		}
		if len(got) != len(want) {
			t.Fatalf("%q: members %q; want %q", body, got, want)
		}
		for k, v := range want {
			if string(got[k]) != string(v) {
				t.Fatalf("%q: member %q is %s; want %s", body, k, got[k], v)
			}
		}
	})
}
