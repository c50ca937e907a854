package handlers

import (
	"encoding/json"
	"net/http"
	"strings"

	"modelserve/catalog"
	"modelserve/views"
)

// The "call it" panel answers the question a served model raises next: how
// do I call it from my code? With the address and the model's name filled
// in, and the token as a placeholder, since the console never shows one.

// tokenPlaceholder is where the panels' commands read the API token from.
const tokenPlaceholder = "$MODELSERVE_TOKEN"

// publicBase is modelserve's address as its users reach it: --public-url
// when set, else the scheme and host this request came by (https behind a
// trusted proxy that says so).
func (s *Server) publicBase(r *http.Request) string {
	if u := strings.TrimRight(s.deps.PublicURL, "/"); u != "" {
		return u
	}
	scheme := "http"
	if r.TLS != nil || viaHTTPS(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// tokenCreate is the command that makes an API token named name in this
// server's data directory: run from any folder, it reaches the database the
// server reads. args go before the name.
func (s *Server) tokenCreate(name string, args ...string) string {
	cmd := "modelserve token create"
	if s.deps.DataDir != "" {
		cmd += " --data " + shellWord(s.deps.DataDir)
	}
	for _, a := range args {
		cmd += " " + a
	}
	return cmd + " " + name
}

// shellWord is s as it can be typed in a shell: as it is when it holds
// nothing a shell reads specially, else single-quoted.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+:,@") == "" {
		return s
	}
	return shellQuote(s)
}

// callItView is the panel for model m, called at base; tokenCommand makes
// a token for it.
func callItView(base string, m catalog.Model, tokenCommand func(name string, args ...string) string) views.CallIt {
	api := base + "/v1"
	name := jsonString(m.Name)
	c := views.CallIt{
		Model: m.Name, BaseURL: api, Token: tokenPlaceholder,
		// --models limits the token to this model and to the gateway.
		TokenCommand: tokenCommand("my-app", "--models", shellWord(m.Name)),
	}
	if m.Capabilities.Embeddings {
		c.Curl = "curl " + api + "/embeddings \\\n" +
			"  -H \"Authorization: Bearer " + tokenPlaceholder + "\" \\\n" +
			"  -H \"Content-Type: application/json\" \\\n" +
			"  -d " + shellQuote(`{"model": `+name+`, "input": "Hello"}`)
		c.Python = "import os\nfrom openai import OpenAI\n\n" +
			"client = OpenAI(base_url=" + jsonString(api) + ", api_key=os.environ[\"MODELSERVE_TOKEN\"])\n" +
			"res = client.embeddings.create(model=" + name + ", input=\"Hello\")\n" +
			"print(len(res.data[0].embedding))"
		c.JavaScript = "import OpenAI from \"openai\";\n\n" +
			"const client = new OpenAI({ baseURL: " + jsonString(api) + ", apiKey: process.env.MODELSERVE_TOKEN });\n" +
			"const res = await client.embeddings.create({ model: " + name + ", input: \"Hello\" });\n" +
			"console.log(res.data[0].embedding.length);"
		return c
	}
	c.Curl = "curl " + api + "/chat/completions \\\n" +
		"  -H \"Authorization: Bearer " + tokenPlaceholder + "\" \\\n" +
		"  -H \"Content-Type: application/json\" \\\n" +
		"  -d " + shellQuote(`{"model": `+name+`, "messages": [{"role": "user", "content": "Hello"}]}`)
	c.Python = "import os\nfrom openai import OpenAI\n\n" +
		"client = OpenAI(base_url=" + jsonString(api) + ", api_key=os.environ[\"MODELSERVE_TOKEN\"])\n" +
		"reply = client.chat.completions.create(\n" +
		"    model=" + name + ",\n" +
		"    messages=[{\"role\": \"user\", \"content\": \"Hello\"}],\n" +
		")\n" +
		"print(reply.choices[0].message.content)"
	c.JavaScript = "import OpenAI from \"openai\";\n\n" +
		"const client = new OpenAI({ baseURL: " + jsonString(api) + ", apiKey: process.env.MODELSERVE_TOKEN });\n" +
		"const reply = await client.chat.completions.create({\n" +
		"  model: " + name + ",\n" +
		"  messages: [{ role: \"user\", content: \"Hello\" }],\n" +
		"});\n" +
		"console.log(reply.choices[0].message.content);"
	return c
}

// jsonString is s as a double-quoted string literal, which JSON, Python
// and JavaScript read alike.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// shellQuote is s as one single-quoted shell word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
