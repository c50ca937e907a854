package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"modelserve/internal/operr"
)

// The client commands (model plan|serve|list, chat) drive a running
// server from a terminal, through the same JSON API and gateway scripts
// use: the address from --url or MODELSERVE_URL, the token from --token or
// MODELSERVE_TOKEN.

const defaultURL = "http://127.0.0.1:8080"

// Bounds on what a server's answers may make the client hold: a JSON
// answer, one line of an event stream, and the reconnects of a stream that
// closes before its job ends.
const (
	maxAnswer     = 32 << 20
	maxStreamLine = 4 << 20
	maxReconnects = 5
)

// client is a running server, as the client commands reach it.
type client struct {
	base string
	// shown is base as every message prints it: without a password.
	shown string
	token string
	http  *http.Client
}

// clientFlags parses a client command's flags: --url and --token, with the
// command's own defined by extra.
func clientFlags(name string, args []string, getenv func(string) string, stderr io.Writer, usage string, extra ...func(*flag.FlagSet)) (*flag.FlagSet, *client, error) {
	fs := newFlagSet(name)
	// The environment is read after the flags, not given as their
	// defaults: --help prints a flag's default, and the token (or a
	// password in the address) would be printed with it.
	base := fs.String("url", "", "the server's address (env MODELSERVE_URL; else "+defaultURL+")")
	token := fs.String("token", "", "API token, from modelserve token create (env MODELSERVE_TOKEN; a flag shows in process lists)")
	for _, define := range extra {
		define(fs)
	}
	if err := parseFlags(fs, args, stderr, usage); err != nil {
		return nil, nil, err
	}
	raw := cmp.Or(*base, getenv("MODELSERVE_URL"), defaultURL)
	u, err := serverURL(raw)
	if err != nil {
		return nil, nil, err
	}
	tok := cmp.Or(*token, getenv("MODELSERVE_TOKEN"))
	if tok == "" {
		return nil, nil, errors.New("no API token: set MODELSERVE_TOKEN (or --token) to one made with modelserve token create --data DIR NAME on the server")
	}
	// No overall timeout: a job's events and a reply stream for as long as
	// they take. Connecting and the answer's headers are bounded.
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute, // a model loaded on demand answers late
	}
	return fs, &client{base: u.String(), shown: u.Redacted(), token: tok, http: &http.Client{Transport: tr}}, nil
}

// serverURL is the server's address from raw. An address ending in /v1
// (or /api/v1) is an OpenAI client's base URL, which an operator often
// has at hand already: the server is the part before it.
func serverURL(raw string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimRight(raw, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, usageError{fmt.Errorf("%s is not a server's address: give --url or MODELSERVE_URL as http://host:port", operr.Quote(redactURL(raw)))}
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/v1"), "/api")
	u.RawPath = ""
	return u, nil
}

// redactURL is an address as the client prints it: without the password
// of its user part (http://user:xxxxx@host), also when it does not parse.
func redactURL(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if at := strings.LastIndexByte(rest, '@'); ok && at >= 0 {
		return scheme + "://xxxxx" + rest[at:]
	}
	return raw
}

// send makes a request with the token; body, when not nil, goes as JSON.
// An answer of 4xx or 5xx is an error with the server's sentence.
func (c *client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("cannot reach modelserve at %s (is it running? MODELSERVE_URL or --url says where): %w", c.shown, err)
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, c.refusal(resp)
	}
	return resp, nil
}

// refusal is the error of a 4xx or 5xx answer: the server's sentence, and
// for a 401 where to get a token.
func (c *client) refusal(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Error any `json:"error"`
	}
	msg := ""
	if json.Unmarshal(b, &e) == nil {
		switch v := e.Error.(type) {
		case string:
			msg = v
		case map[string]any: // the gateway answers in OpenAI's shape
			msg, _ = v["message"].(string)
		}
	}
	if msg == "" {
		msg = strings.TrimSpace(string(b))
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
	}
	if msg == "" {
		msg = resp.Status
	}
	msg = cliHints(msg)
	if resp.StatusCode == http.StatusUnauthorized {
		msg = fmt.Sprintf("%s refused the token (401): %s", c.shown, msg)
	}
	return refusedError{status: resp.StatusCode, msg: msg}
}

// refusedError is a server's 4xx or 5xx answer: its sentence, and the
// status a command may act on (a replica gone is a 404).
type refusedError struct {
	status int
	msg    string
}

func (e refusedError) Error() string {
	if e.status == http.StatusUnauthorized {
		return e.msg
	}
	return fmt.Sprintf("%s (%d)", e.msg, e.status)
}

// refusedWith says err is a server's answer of status.
func refusedWith(err error, status int) bool {
	var r refusedError
	return errors.As(err, &r) && r.status == status
}

// do sends a request and reads its answer into v (nil: the answer is not
// read).
func (c *client) do(ctx context.Context, method, path string, body, v any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if v == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxAnswer)).Decode(v); err != nil {
		return fmt.Errorf("%s %s answered what is not the JSON expected: %w", method, path, err)
	}
	return nil
}

// apiHints are the API's routes that the server's sentences point to, with
// the command that shows the same to someone at a terminal.
var apiHints = strings.NewReplacer(
	"GET /api/v1/catalog lists", "modelserve model list lists",
	"GET /api/v1/replicas lists", "modelserve ps lists",
	"GET /api/v1/jobs lists", "modelserve job list lists",
)

// checkHint is the API's way to ask a repository for new weights, which
// modelserve update --check MODEL does.
var checkHint = regexp.MustCompile(`POST /api/v1/catalog/([^/\s]+)/check`)

// cliHints is a server's sentence as the command line says it: where it
// names an API route to call next, the command that does it.
func cliHints(msg string) string {
	msg = apiHints.Replace(msg)
	return checkHint.ReplaceAllString(msg, "modelserve update --check $1")
}
