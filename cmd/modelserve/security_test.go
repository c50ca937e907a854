package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"

	"modelserve/internal/auth"
	"modelserve/internal/testlog"
	"modelserve/internal/words"
)

// started is a server serve() runs for a test, and its log.
type started struct {
	addr string
	logs *testlog.Buffer
}

// log is what the server has logged so far.
func (s started) log() string {
	return s.logs.String()
}

// startServe runs serve with cfg until the test ends.
func startServe(t *testing.T, cfg config) started {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	done := make(chan error, 1)
	logs := &testlog.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	go func() { done <- serve(ctx, cfg, log, func(a string) { addrc <- a }) }()
	var s started
	select {
	case s.addr = <-addrc:
	case err := <-done:
		cancel()
		t.Fatalf("serve stopped before listening: %v\n%s", err, started{logs: logs}.log())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("serve did not start listening")
	}
	s.logs = logs
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve returned %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
		if t.Failed() {
			t.Logf("server log:\n%s", s.log())
		}
	})
	return s
}

// console is a browser at the console: a cookie jar, redirects not
// followed, so a test sees where it is sent.
type console struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

func newConsole(t *testing.T, base string, tr http.RoundTripper) *console {
	jar, _ := cookiejar.New(nil)
	return &console{t: t, base: base, c: &http.Client{
		Jar: jar, Transport: tr, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (c *console) do(method, path string, form url.Values) *http.Response {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, c.base+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.c.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

// page gets path and reads the CSRF token its forms carry.
func (c *console) page(path string) (*http.Response, *goquery.Document) {
	c.t.Helper()
	resp := c.do("GET", path, nil)
	defer resp.Body.Close()
	doc, err := goquery.NewDocumentFromReader(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if tok := doc.Find(`input[name="csrf"]`).First().AttrOr("value", ""); tok != "" {
		c.csrf = tok
	}
	return resp, doc
}

func (c *console) signIn(name, password string) *http.Response {
	c.t.Helper()
	c.page("/login")
	resp := c.do("POST", "/login", url.Values{"name": {name}, "password": {password}, "csrf": {c.csrf}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		c.t.Fatalf("signing in as %s: %s", name, resp.Status)
	}
	c.page("/jobs")
	return resp
}

// copyOf is another browser with c's cookies: a cookie lifted off a
// shared machine.
func (c *console) copyOf() *console {
	u, _ := url.Parse(c.base)
	o := newConsole(c.t, c.base, c.c.Transport)
	o.c.Jar.SetCookies(u, c.c.Jar.Cookies(u))
	o.csrf = c.csrf
	return o
}

// signedIn says whether c is let into the console.
func (c *console) signedIn() bool {
	c.t.Helper()
	resp := c.do("GET", "/jobs", nil)
	resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		return true
	case resp.StatusCode == http.StatusSeeOther && strings.HasPrefix(resp.Header.Get("Location"), "/login"):
		return false
	}
	c.t.Fatalf("/jobs answered %s to %q", resp.Status, resp.Header.Get("Location"))
	return false
}

func mustRun(t *testing.T, stdin string, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if err := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(stdin), &out, &errb); err != nil {
		t.Fatalf("modelserve %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return out.String(), errb.String()
}

func TestSignOutEndsTheSession(t *testing.T) {
	dir := madeDataDir(t)
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
	s := startServe(t, config{Data: dir})
	base := "http://" + s.addr

	b := newConsole(t, base, nil)
	b.signIn("ada", "a long password")
	stolen := b.copyOf()
	if !stolen.signedIn() {
		t.Fatal("a copy of a live cookie is not signed in; the test proves nothing")
	}
	list, _ := mustRun(t, "", "session", "list", "--data", dir, "ada")
	if !strings.Contains(list, "ada") || !strings.Contains(list, "127.0.0.1") || !strings.Contains(list, "Go-http-client") {
		t.Fatalf("session list does not show the session, its address and browser:\n%s", list)
	}
	list, _ = mustRun(t, "", "session", "list", "--data", dir, "--output", "json", "ada")
	var sessions []struct{ User, Address string }
	if err := json.Unmarshal([]byte(list), &sessions); err != nil || len(sessions) != 1 || sessions[0].User != "ada" || sessions[0].Address == "" {
		t.Fatalf("session list --output json: %v\n%s", err, list)
	}

	resp := b.do("POST", "/logout", url.Values{"csrf": {b.csrf}})
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out: %s", resp.Status)
	}
	if stolen.signedIn() {
		t.Fatal("after signing out, a copy of the cookie still gets in")
	}
	if list, _ := mustRun(t, "", "session", "list", "--data", dir); strings.Contains(list, "ada") {
		t.Fatalf("the session is still listed after signing out:\n%s", list)
	}

	// A password change ends every session, in the running server.
	one, two := newConsole(t, base, nil), newConsole(t, base, nil)
	one.signIn("ada", "a long password")
	two.signIn("ada", "a long password")
	_, said := mustRun(t, "another long password\n", "user", "passwd", "--data", dir, "ada")
	if !strings.Contains(said, "2 sessions ended") {
		t.Errorf("user passwd said %q", said)
	}
	if one.signedIn() || two.signedIn() {
		t.Fatal("a session outlived a password change")
	}

	// Revoking by user, and by ID.
	one.signIn("ada", "another long password")
	mustRun(t, "", "session", "revoke", "--data", dir, "--user", "ada")
	if one.signedIn() {
		t.Fatal("a session outlived session revoke --user")
	}
	one.signIn("ada", "another long password")
	list, _ = mustRun(t, "", "session", "list", "--data", dir, "ada")
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) != 2 {
		t.Fatalf("session list:\n%s", list)
	}
	mustRun(t, "", "session", "revoke", "--data", dir, strings.Fields(lines[1])[0])
	if one.signedIn() {
		t.Fatal("a session outlived session revoke ID")
	}

	// Removing the user ends theirs.
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "bob")
	one.signIn("bob", "a long password")
	mustRun(t, "", "user", "remove", "--data", dir, "bob")
	if one.signedIn() {
		t.Fatal("a session outlived its user's removal")
	}
}

func TestDataFolderIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := startServe(t, config{Data: dir})
	// The migrations have written, so the -wal and -shm files are there.
	newConsole(t, "http://"+s.addr, nil).page("/login")
	want := map[string]os.FileMode{
		"":                  0o700,
		"modelserve.db":     0o600,
		"modelserve.db-wal": 0o600,
		"modelserve.db-shm": 0o600,
		"session.key":       0o600,
	}
	for name, mode := range want {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", or(name, "the data directory"), err)
			continue
		}
		if info.Mode().Perm() != mode {
			t.Errorf("%s is %v, want %v", or(name, "the data directory"), info.Mode().Perm(), mode)
		}
	}
	if !strings.Contains(s.log(), "session_keys="+filepath.Join(dir, "session.key")) {
		t.Error("the log does not say where the session keys are")
	}
}

func TestDataFolderOfAnOlderStartIsMadePrivate(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	db := filepath.Join(dir, "modelserve.db")
	os.WriteFile(db, nil, 0o644)
	os.Chmod(db, 0o644)
	startServe(t, config{Data: dir})
	for _, f := range []string{dir, db} {
		info, _ := os.Stat(f)
		if info.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is still %v after a start", f, info.Mode().Perm())
		}
	}
}

func TestKeysRotateSignsEveryoneOut(t *testing.T) {
	dir := madeDataDir(t)
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
	s := startServe(t, config{Data: dir})
	b := newConsole(t, "http://"+s.addr, nil)
	b.signIn("ada", "a long password")
	before, err := os.ReadFile(filepath.Join(dir, "session.key"))
	if err != nil {
		t.Fatal(err)
	}
	_, said := mustRun(t, "", "keys", "rotate", "--data", dir)
	if !strings.Contains(said, "1 session ended") {
		t.Errorf("keys rotate said %q", said)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "session.key"))
	if bytes.Equal(before, after) {
		t.Fatal("keys rotate left the keys as they were")
	}
	if b.signedIn() {
		t.Fatal("signed in after keys rotate")
	}
	// With the keys given as a secret there is no file to rotate.
	err = run(context.Background(), []string{"keys", "rotate", "--data", dir},
		func(k string) string {
			if k == "MODELSERVE_SESSION_SECRET" {
				return strings.Repeat("x", 40)
			}
			return ""
		}, nil, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "MODELSERVE_SESSION_SECRET") {
		t.Fatalf("keys rotate with a secret set: %v", err)
	}
}

func TestSessionSecretKeepsSessionsAcrossDataDirectories(t *testing.T) {
	// Two servers given one secret read each other's cookies, and no key
	// file is written.
	dir := madeDataDir(t)
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
	secret := strings.Repeat("correct-horse-", 4)
	s := startServe(t, config{Data: dir, SessionSecret: secret})
	b := newConsole(t, "http://"+s.addr, nil)
	b.signIn("ada", "a long password")
	if _, err := os.Stat(filepath.Join(dir, "session.key")); err == nil {
		t.Error("a key file was written although the keys come from a secret")
	}
	other := startServe(t, config{Data: dir, SessionSecret: secret})
	o := b.copyOf()
	o.base = "http://" + other.addr
	// Cookies are per host, not per port: the jar sends it.
	if !o.signedIn() {
		t.Fatal("a second server with the same secret does not read the session")
	}

	var errb bytes.Buffer
	err := run(context.Background(), []string{"serve", "--data", t.TempDir(), "--addr", "127.0.0.1:0", "--session-secret", "short"},
		func(string) string { return "" }, nil, io.Discard, &errb)
	if err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("a short secret: %v", err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "modelserve test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

func TestServeHTTPS(t *testing.T) {
	certFile, keyFile, pool := selfSigned(t)
	dir := madeDataDir(t)
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
	s := startServe(t, config{Data: dir, TLSCert: certFile, TLSKey: keyFile})

	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	b := newConsole(t, "https://"+s.addr, tr)
	resp := b.signIn("ada", "a long password")
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "modelserve_session" {
			cookie = c
		}
	}
	if cookie == nil || !cookie.Secure || !cookie.HttpOnly {
		t.Fatalf("session cookie over HTTPS: %+v; want Secure and HttpOnly", cookie)
	}
	if resp.TLS == nil {
		t.Fatal("the sign-in was not answered over TLS")
	}
	// Plain HTTP on the same port gets no console.
	if resp, err := http.Get("http://" + s.addr + "/login"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("the console answers plain HTTP on the HTTPS port")
		}
	}

	for _, tc := range []struct {
		name string
		cfg  config
		want string
	}{
		{"a certificate without a key", config{TLSCert: certFile}, "needs both --tls-cert and --tls-key"},
		{"a key that is no certificate", config{TLSCert: keyFile, TLSKey: keyFile}, "cannot serve HTTPS"},
		{"a bad proxy range", config{TrustProxy: "10.0.0.0/99"}, "--trust-proxy"},
		{"a public URL without a scheme", config{PublicURL: "models.example.com"}, "--public-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Data, tc.cfg.Addr = t.TempDir(), "127.0.0.1:0"
			err := serve(context.Background(), tc.cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("serve: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestSecureCookiesBehindAProxy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		cfg    config
		proto  string
		secure bool
	}{
		{"public https URL", config{PublicURL: "https://models.example.com"}, "", true},
		{"trusted proxy says https", config{TrustProxy: "127.0.0.1/32"}, "https", true},
		{"untrusted peer says https", config{TrustProxy: "10.0.0.0/8"}, "https", false},
		{"no proxy settings", config{}, "https", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Data = t.TempDir()
			s := startServe(t, tc.cfg)
			req, _ := http.NewRequest("GET", "http://"+s.addr+"/login", nil)
			if tc.proto != "" {
				req.Header.Set("X-Forwarded-Proto", tc.proto)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			for _, c := range resp.Cookies() {
				if c.Name == "modelserve_session" {
					if c.Secure != tc.secure {
						t.Fatalf("cookie Secure=%v, want %v", c.Secure, tc.secure)
					}
					return
				}
			}
			t.Fatal("no session cookie")
		})
	}
}

func TestAPIRequestBounds(t *testing.T) {
	s := startAPI(t, config{Addr: "127.0.0.1:0", Data: t.TempDir(), HFEndpoint: "http://127.0.0.1:1"})
	send := func(t *testing.T, method, path, auth, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, s.base+path, strings.NewReader(body))
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e struct{ Error string }
		json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	long := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		name, method, path, auth, body string
		status                         int
		want                           string
	}{
		{"bearer in lower case", "GET", "/api/v1/jobs", "bearer " + s.token, "", 200, ""},
		{"BEARER in capitals", "GET", "/api/v1/jobs", "BEARER " + s.token, "", 200, ""},
		{"another scheme", "GET", "/api/v1/jobs", "Basic " + s.token, "", 401, "the API needs a token"},
		{"two JSON values", "POST", "/api/v1/serve", "Bearer " + s.token, `{"repo":"a/b"} {"repo":"c/d"}`, 400,
			"more than one JSON value"},
		{"a value and garbage", "POST", "/api/v1/serve", "Bearer " + s.token, `{"repo":"a/b"} ]`, 400, "more than one JSON value"},
		{"a long unknown field", "POST", "/api/v1/serve", "Bearer " + s.token, `{"` + long + `":1}`, 400, "unknown field"},
		{"a long number", "POST", "/api/v1/serve", "Bearer " + s.token, `{"repo":"a/b","replicas":1` + strings.Repeat("0", 5000) + `}`, 400,
			`"replicas" should be a whole number`},
		{"a long path", "GET", "/api/v1/" + long, "Bearer " + s.token, "", 404, "no API route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, msg := send(t, tc.method, tc.path, tc.auth, tc.body)
			if status != tc.status || !strings.Contains(msg, tc.want) {
				t.Fatalf("%d %q, want %d saying %q", status, msg, tc.status, tc.want)
			}
			if len(msg) > words.ClipMost+200 {
				t.Fatalf("the sentence is %d characters: it quotes the whole of the input", len(msg))
			}
		})
	}
	var list struct{ Total int }
	if s.do("GET", "/api/v1/jobs", nil, &list); list.Total != 0 {
		t.Errorf("refused requests started %d jobs", list.Total)
	}
}

func TestSessionCommandRefusals(t *testing.T) {
	dir := madeDataDir(t)
	mustRun(t, "a long password\n", "user", "add", "--data", dir, "ada")
	for _, tc := range []struct {
		name  string
		args  []string
		want  string
		stdin string
	}{
		{"no command", []string{"session"}, "session needs a command", ""},
		{"unknown command", []string{"session", "frob", "--data", dir}, `"frob" is not a session command`, ""},
		{"revoke without an ID", []string{"session", "revoke", "--data", dir}, "session list shows the IDs", ""},
		{"revoke an ID and a user", []string{"session", "revoke", "--data", dir, "--user", "ada", "0123"}, "one session ID, or --user", ""},
		{"revoke an unknown ID", []string{"session", "revoke", "--data", dir, "0123abcd"}, `there is no session "0123abcd"`, ""},
		{"passwd of nobody", []string{"user", "passwd", "--data", dir, "nobody"}, `no user is called "nobody"`, "a long password\n"},
		{"remove nobody", []string{"user", "remove", "--data", dir, "nobody"}, `no user is called "nobody"`, ""},
		{"passwd too short", []string{"user", "passwd", "--data", dir, "ada"}, "at least", "short\n"},
		{"keys without rotate", []string{"keys", "--data", dir}, "keys needs a command: rotate", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, func(string) string { return "" }, strings.NewReader(tc.stdin), io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}

	// A generated password is printed once, and works.
	out, said := mustRun(t, "", "user", "passwd", "--data", dir, "ada")
	pw := strings.TrimSpace(out)
	if len(pw) < 20 || !strings.Contains(said, "only this once") {
		t.Fatalf("user passwd printed %q, said %q", out, said)
	}
	db, err := openData(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := auth.NewUsers(db).Authenticate(context.Background(), "ada", pw); err != nil {
		t.Fatalf("the generated password does not sign in: %v", err)
	}
}

// TestMetricsToken: /metrics is open unless the operator gives a metrics
// token, and then only a scraper that sends it reads the figures, which
// name every model served.
func TestMetricsToken(t *testing.T) {
	get := func(base, auth string) (int, string) {
		req, _ := http.NewRequest("GET", base+"/metrics", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	open := startServe(t, config{Data: t.TempDir()})
	if code, body := get("http://"+open.addr, ""); code != 200 || !strings.Contains(body, "modelserve_") {
		t.Errorf("/metrics without a metrics token set: %d, want the figures to anyone", code)
	}
	closed := startServe(t, config{Data: t.TempDir(), MetricsToken: "scrape-me-0123456789"})
	base := "http://" + closed.addr
	for _, auth := range []string{"", "Bearer wrong", "Basic c2NyYXBlLW1lLTAxMjM0NTY3ODk="} {
		if code, body := get(base, auth); code != http.StatusUnauthorized || strings.Contains(body, "modelserve_") ||
			!strings.Contains(body, "--metrics-token") {
			t.Errorf("/metrics with %q: %d %q, want 401 naming --metrics-token and no figures", auth, code, body)
		}
	}
	if code, body := get(base, "bearer scrape-me-0123456789"); code != 200 || !strings.Contains(body, "modelserve_") {
		t.Errorf("/metrics with the token: %d, want the figures", code)
	}
}
