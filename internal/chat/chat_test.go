package chat

import "testing"

func TestRequestBodies(t *testing.T) {
	half := 0.5
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"a deterministic request sends temperature 0 and its seed",
			Deterministic("tiny", 32, 42, User("hi")).Body(),
			`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":32,"temperature":0,"seed":42}`},
		{"a streamed request asks for its usage, and leaves out what was not set",
			Request{Model: "tiny", Messages: []Message{System("be brief"), User("hi")}, Stream: true, StreamOptions: &StreamOptions{IncludeUsage: true}}.Body(),
			`{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`},
		{"a temperature that was set is sent",
			Request{Model: "tiny", Messages: []Message{User("hi")}, Temperature: &half}.Body(),
			`{"model":"tiny","messages":[{"role":"user","content":"hi"}],"temperature":0.5}`},
		{"one text to embed is a string",
			Embed("embed", "hello").Body(),
			`{"model":"embed","input":"hello"}`},
		{"several texts to embed are a list",
			Embed("embed", "a", "b", "c").Body(),
			`{"model":"embed","input":["a","b","c"]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if string(tc.body) != tc.want {
				t.Errorf("body\n%s\nwant\n%s", tc.body, tc.want)
			}
		})
	}
}

func TestReadCompletion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		ok     bool
		text   string
		tokens int
	}{
		{"a whole answer with its usage",
			`{"choices":[{"message":{"role":"assistant","content":"Hello."}}],"usage":{"completion_tokens":3}}`, true, "Hello.", 3},
		{"a streamed chunk's delta",
			`{"choices":[{"delta":{"content":"Hel"}}]}`, true, "Hel", -1},
		{"an error's body is not a completion",
			`{"error":{"message":"model not found"}}`, false, "", -1},
		{"not JSON",
			`upstream connect error`, false, "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := ReadCompletion([]byte(tc.answer))
			if ok != tc.ok || c.Text() != tc.text {
				t.Errorf("ReadCompletion = %q, %v; want %q, %v", c.Text(), ok, tc.text, tc.ok)
			}
			switch {
			case c.Usage == nil && tc.tokens != -1:
				t.Errorf("no usage, want %d tokens", tc.tokens)
			case c.Usage != nil && c.Usage.CompletionTokens != tc.tokens:
				t.Errorf("usage %d tokens, want %d", c.Usage.CompletionTokens, tc.tokens)
			}
		})
	}
}

func TestReadEmbeddings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer string
		ok     bool
	}{
		{"a vector", `{"data":[{"index":0,"embedding":[0.1,0.2]}]}`, true},
		{"no vector", `{"data":[{"index":0,"embedding":[]}]}`, false},
		{"no data", `{"data":[]}`, false},
		{"not JSON", `<html>`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := ReadEmbeddings([]byte(tc.answer)); ok != tc.ok {
				t.Errorf("ReadEmbeddings(%s) ok = %v, want %v", tc.answer, ok, tc.ok)
			}
		})
	}
}
