package gateway

import (
	"encoding/json"
	"testing"
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
