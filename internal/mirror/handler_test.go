package mirror

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHandlerServesPresentFiles(t *testing.T) {
	srv := newHub(t)
	content := randomish(256<<10, 20)
	f := addFile(t, srv, "Q4/tiny.gguf", content)
	m := newMirror(t, srv, nil)
	local := mustFetch(t, m, f)[0]
	st, _ := os.Stat(local)
	base := "/mirror/" + model + "/" + f.Revision + "/"

	// Things a node must never get.
	os.WriteFile(filepath.Join(m.dir, model, f.Revision, "Q4", "next.gguf.partial"), []byte("half"), 0o644)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret"), 0o644)
	os.Symlink(secret, filepath.Join(m.dir, model, f.Revision, "Q4", "link.gguf"))
	outside := filepath.Join(filepath.Dir(m.dir), "outside.gguf")
	os.WriteFile(outside, []byte("outside"), 0o644)
	t.Cleanup(func() { os.Remove(outside) })

	h := httptest.NewServer(m.Handler())
	defer h.Close()

	for _, tc := range []struct {
		name     string
		method   string
		path     string // sent as is, not cleaned
		header   map[string]string
		status   int
		body     []byte // nil: not checked
		wantETag bool
	}{
		{name: "whole file", path: base + "Q4/tiny.gguf", status: 200, body: content, wantETag: true},
		{name: "a range", path: base + "Q4/tiny.gguf", header: map[string]string{"Range": "bytes=1000-1999"},
			status: 206, body: content[1000:2000]},
		{name: "the rest from an offset", path: base + "Q4/tiny.gguf", header: map[string]string{"Range": "bytes=200000-"},
			status: 206, body: content[200000:]},
		{name: "HEAD", method: "HEAD", path: base + "Q4/tiny.gguf", status: 200, body: []byte{}},
		{name: "the node has it (If-None-Match)", path: base + "Q4/tiny.gguf",
			header: map[string]string{"If-None-Match": `"` + f.SHA256 + `"`}, status: 304},
		{name: "the node has it (If-Modified-Since)", path: base + "Q4/tiny.gguf",
			header: map[string]string{"If-Modified-Since": st.ModTime().Add(time.Hour).UTC().Format(http.TimeFormat)}, status: 304},
		{name: "another sha256 (If-None-Match)", path: base + "Q4/tiny.gguf",
			header: map[string]string{"If-None-Match": `"0000"`}, status: 200, body: content},
		{name: "dot-dot", path: base + "../../../outside.gguf", status: 400},
		{name: "escaped dot-dot", path: base + "%2e%2e/%2e%2e/%2e%2e/outside.gguf", status: 400},
		{name: "dot-dot as the model", path: "/mirror/../x/y", status: 400},
		{name: "partial file", path: base + "Q4/next.gguf.partial", status: 404},
		{name: "the name of a partial file", path: base + "Q4/next.gguf", status: 404},
		{name: "sidecar", path: base + "Q4/.tiny.gguf.sha256", status: 404},
		{name: "symlink out of the mirror", path: base + "Q4/link.gguf", status: 404},
		{name: "a folder", path: base + "Q4", status: 404},
		{name: "outside /mirror/", path: "/other/" + model + "/" + f.Revision + "/Q4/tiny.gguf", status: 404},
		{name: "POST", method: "POST", path: base + "Q4/tiny.gguf", status: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method := tc.method
			if method == "" {
				method = "GET"
			}
			req, err := http.NewRequest(method, h.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			// Opaque keeps the path exactly as written: no client cleans it.
			req.URL.Opaque = tc.path
			for k, v := range tc.header {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status {
				t.Fatalf("%s %s: %d, want %d (%q)", method, tc.path, resp.StatusCode, tc.status, body)
			}
			if tc.body != nil && sha(body) != sha(tc.body) {
				t.Errorf("%s %s: %d bytes, not the %d expected", method, tc.path, len(body), len(tc.body))
			}
			if strings.Contains(string(body), "secret") || strings.Contains(string(body), "outside") && tc.status != 200 {
				t.Errorf("served a file outside the mirror: %q", body)
			}
			if tc.wantETag && resp.Header.Get("ETag") != `"`+f.SHA256+`"` {
				t.Errorf("ETag %q, want the sha256", resp.Header.Get("ETag"))
			}
		})
	}
}

func TestRemove(t *testing.T) {
	for _, tc := range []struct {
		name      string
		inUse     bool
		path      string // "" for the fetched file
		wantErr   string
		wantFiles int // files left in the mirror
	}{
		{name: "in use by a replica", inUse: true,
			wantErr: "Q4/tiny-00001-of-00002.gguf of tiny is used by a running replica; stop that replica before removing the file from the mirror", wantFiles: 4},
		{name: "not in use", wantFiles: 2},
		{name: "not on the mirror", path: "Q4/none.gguf", wantErr: "not on the mirror", wantFiles: 4},
		{name: "a bad name", path: "../x", wantErr: "climbs out of its folder", wantFiles: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHub(t)
			a := addFile(t, srv, "Q4/tiny-00001-of-00002.gguf", randomish(64<<10, 21))
			b := addFile(t, srv, "Q4/tiny-00002-of-00002.gguf", randomish(64<<10, 22))
			b.Revision = a.Revision
			m := newMirror(t, srv, nil)
			local := mustFetch(t, m, a, b)[0]
			p := tc.path
			if p == "" {
				p = a.Path
			}
			var asked string

			err := m.Remove(context.Background(), model, a.Revision, p, func(lp string) bool { asked = lp; return tc.inUse })

			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Remove: %v\nwant an error saying %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if tc.name == "not on the mirror" && !errors.Is(err, ErrNotFound) {
				t.Errorf("Remove of a missing file: %v, want ErrNotFound", err)
			}
			if tc.path == "" && asked != local {
				t.Errorf("inUse was asked about %q, want %q", asked, local)
			}
			if left := files(t, m.dir); len(left) != tc.wantFiles {
				t.Errorf("the mirror holds %q, want %d files", left, tc.wantFiles)
			}
		})
	}

	t.Run("the last file takes its empty folders", func(t *testing.T) {
		srv := newHub(t)
		f := addFile(t, srv, "deep/er/tiny.gguf", []byte("gguf"))
		m := newMirror(t, srv, nil)
		mustFetch(t, m, f)
		if err := m.Remove(context.Background(), model, f.Revision, f.Path, nil); err != nil {
			t.Fatal(err)
		}
		if entries, _ := os.ReadDir(m.dir); len(entries) != 0 {
			t.Errorf("the mirror still holds %v", entries)
		}
		if _, err := os.Stat(m.dir); err != nil {
			t.Errorf("Remove took the mirror's own directory: %v", err)
		}
		if list, _ := m.List(context.Background()); len(list) != 0 {
			t.Errorf("List after Remove: %+v", list)
		}
	})
}

func TestList(t *testing.T) {
	srv := newHub(t)
	a := addFile(t, srv, "tiny-Q8_0.gguf", randomish(64<<10, 23))
	b := addFile(t, srv, "tiny-Q4_K_M.gguf", randomish(64<<10, 24))
	m := newMirror(t, srv, nil)
	mustFetch(t, m, a)
	// b stopped part way, as after a restart.
	lb, _ := m.LocalPath(b.Model, b.Revision, b.Path)
	os.MkdirAll(filepath.Dir(lb), 0o755)
	os.WriteFile(lb+".partial", make([]byte, 1000), 0o644)
	// c failed.
	c := addFile(t, srv, "broken.gguf", randomish(1000, 25))
	srv.FlipByte(repoID, c.Path, 10)
	if _, err := m.Fetch(context.Background(), []File{c}, nil); err == nil {
		t.Fatal("the corrupted file was accepted")
	}

	got, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("List: %+v, want a present, a partial and a failed file", got)
	}
	for i := 1; i < len(got); i++ {
		if a, b := got[i-1], got[i]; a.Revision > b.Revision || (a.Revision == b.Revision && a.Path > b.Path) {
			t.Errorf("List is not sorted by revision and path: %s/%s before %s/%s", a.Revision, a.Path, b.Revision, b.Path)
		}
	}
	byPath := map[string]Entry{}
	for _, e := range got {
		byPath[e.Path] = e
	}
	if e := byPath[a.Path]; e.State != Present || e.SHA256 != a.SHA256 || e.Size != a.Size || e.Revision != a.Revision || e.Modified.IsZero() {
		t.Errorf("the present file: %+v", e)
	}
	if e := byPath[b.Path]; e.State != Partial || e.BytesDone != 1000 {
		t.Errorf("the partial file: %+v", e)
	}
	if e := byPath[c.Path]; e.State != Failed || !strings.Contains(e.Err, "arrived with sha256") || e.BytesTotal != 1000 {
		t.Errorf("the failed file: %+v", e)
	}
}
