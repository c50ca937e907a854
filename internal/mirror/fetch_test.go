package mirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"modelserve/internal/hf"
	"modelserve/internal/hubtest"
)

func TestFetchResumesAfterCutConnection(t *testing.T) {
	srv := newHub(t)
	content := randomish(4<<20, 1)
	f := addFile(t, srv, "Q4_K_M/tiny-Q4_K_M.gguf", content)
	cutAt := int64(len(content)) * 4 / 10
	srv.CutNext(repoID, f.Path, cutAt, 1)
	m := newMirror(t, srv, nil)

	paths := mustFetch(t, m, f)

	want := filepath.Join(m.dir, model, f.Revision, "Q4_K_M", "tiny-Q4_K_M.gguf")
	if paths[0] != want {
		t.Errorf("Fetch put the file at %s, want %s", paths[0], want)
	}
	mustHave(t, paths[0], content)
	served(t, srv, f.Path, int64(len(content)), int64(len(content))+slack)
	if n := srv.Requests(repoID, f.Path); n != 2 {
		t.Errorf("the registry answered %d requests for the file, want 2 (the cut one and the resume)", n)
	}
	var ranges []string
	for _, r := range srv.Log() {
		if r.Server == "cdn" {
			ranges = append(ranges, r.Range)
		}
	}
	if want := []string{"", fmt.Sprintf("bytes=%d-", cutAt)}; !slices.Equal(ranges, want) {
		t.Errorf("the CDN was asked for ranges %q, want %q", ranges, want)
	}
	if got, want := files(t, m.dir), []string{
		model + "/" + f.Revision + "/Q4_K_M/.tiny-Q4_K_M.gguf.sha256",
		model + "/" + f.Revision + "/Q4_K_M/tiny-Q4_K_M.gguf",
	}; !slices.Equal(got, want) {
		t.Errorf("the mirror holds %q, want %q", got, want)
	}
}

func TestFetchRefusesACorruptedFile(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 2)
	f := addFile(t, srv, "tiny-Q8_0.gguf", content)
	srv.FlipByte(repoID, f.Path, 123456)
	m := newMirror(t, srv, nil)

	_, err := m.Fetch(context.Background(), []File{f}, nil)

	corrupted := append([]byte(nil), content...)
	corrupted[123456] ^= 0xFF
	want := fmt.Sprintf("tiny-Q8_0.gguf arrived with sha256 %s, and the registry published %s", sha(corrupted)[:12], f.SHA256[:12])
	if err == nil || err.Error() != want {
		t.Fatalf("Fetch: %v\nwant: %s", err, want)
	}
	if left := files(t, m.dir); len(left) != 0 {
		t.Errorf("a corrupted fetch left %q behind", left)
	}
	if n := srv.Requests(repoID, f.Path); n != 1 {
		t.Errorf("a corrupted file was requested %d times, want once: a checksum mismatch is not retried", n)
	}
	entries, err := m.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].State != Failed || entries[0].Err != want {
		t.Errorf("List after the failure: %+v, want one failed entry saying %q", entries, want)
	}
}

// A process stopped half way (here: its Fetch cancelled and the Mirror
// dropped) leaves a partial file that a new Mirror on the same directory
// continues.
func TestFetchResumesAfterRestart(t *testing.T) {
	srv := newHub(t)
	content := randomish(2<<20, 3)
	f := addFile(t, srv, "tiny-F16.gguf", content)
	srv.Trickle(repoID, f.Path, 1<<20)
	dir := t.TempDir()
	first := newMirror(t, srv, func(o *Options) { o.Dir = dir })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := first.Fetch(ctx, []File{f}, func(p Progress) {
		if p.BytesDone >= p.BytesTotal*4/10 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled Fetch returned %v, want context.Canceled", err)
	}
	st, err := os.Stat(filepath.Join(dir, model, f.Revision, "tiny-F16.gguf.partial"))
	if err != nil {
		t.Fatalf("the cancelled fetch kept no partial file: %v", err)
	}
	if st.Size() < int64(len(content))*3/10 || st.Size() >= int64(len(content)) {
		t.Fatalf("the partial file has %d of %d bytes, want about 40%%", st.Size(), len(content))
	}

	srv.ClearFaults(repoID, f.Path)
	second := newMirror(t, srv, func(o *Options) { o.Dir = dir })
	paths := mustFetch(t, second, f)

	mustHave(t, paths[0], content)
	served(t, srv, f.Path, int64(len(content)), int64(len(content))+slack)
	log := srv.Log()
	if last := log[len(log)-1]; last.Range != fmt.Sprintf("bytes=%d-", st.Size()) {
		t.Errorf("the second mirror asked for %q, want the bytes after the partial file's %d", last.Range, st.Size())
	}
}

func TestConcurrentFetchesShareOneDownload(t *testing.T) {
	srv := newHub(t)
	var set []File
	contents := map[string][]byte{}
	for i := range 5 {
		content := randomish(512<<10, uint64(10+i))
		f := addFile(t, srv, fmt.Sprintf("tiny-Q4_K_M-%05d-of-00005.gguf", i+1), content)
		// Slow enough that the callers really overlap.
		srv.Trickle(repoID, f.Path, 4<<20)
		contents[f.Path] = content
		set = append(set, f)
	}
	// Commits differ per file; a set comes from one commit.
	for i := range set {
		set[i].Revision = set[0].Revision
	}
	m := newMirror(t, srv, nil)

	var wg sync.WaitGroup
	results := make([][]string, 20)
	finals := make([]Progress, 20)
	errs := make([]error, 20)
	for c := range 20 {
		wg.Go(func() {
			// Each caller asks in its own order.
			mine := slices.Clone(set)
			for i := range c % 5 {
				mine[i], mine[4-i] = mine[4-i], mine[i]
			}
			paths, err := m.Fetch(context.Background(), mine, func(p Progress) { finals[c] = p })
			errs[c] = err
			for i, p := range paths {
				if filepath.Base(p) != filepath.Base(mine[i].Path) {
					errs[c] = fmt.Errorf("path %d is %s for %s", i, p, mine[i].Path)
				}
			}
			results[c] = paths
		})
	}
	wg.Wait()

	for c, err := range errs {
		if err != nil {
			t.Errorf("caller %d: %v", c, err)
		}
		if p := finals[c]; p.BytesDone != 5*512<<10 || p.BytesTotal != p.BytesDone {
			t.Errorf("caller %d's last progress: %d of %d bytes, want all of %d", c, p.BytesDone, p.BytesTotal, 5*512<<10)
		}
	}
	for _, f := range set {
		if n := srv.Requests(repoID, f.Path); n != 1 {
			t.Errorf("%s was requested %d times by 20 callers, want once", f.Path, n)
		}
		served(t, srv, f.Path, 512<<10, 512<<10)
		mustHave(t, filepath.Join(m.dir, model, set[0].Revision, f.Path), contents[f.Path])
	}
}

func TestSecondFetchCostsNoRegistryBytes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		restart bool // a new Mirror, as after a restart
	}{
		{name: "same mirror"},
		{name: "after a restart", restart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHub(t)
			content := randomish(1<<20, 4)
			f := addFile(t, srv, "tiny.gguf", content)
			m := newMirror(t, srv, nil)
			first := mustFetch(t, m, f)
			srv.ResetCounters()
			if tc.restart {
				m = newMirror(t, srv, func(o *Options) { o.Dir = m.dir })
			}

			var last Progress
			paths, err := m.Fetch(context.Background(), []File{f}, func(p Progress) { last = p })
			if err != nil {
				t.Fatal(err)
			}
			if paths[0] != first[0] {
				t.Errorf("the second Fetch gave %s, the first %s", paths[0], first[0])
			}
			if n, b := srv.Requests(repoID, f.Path), srv.BytesServed(repoID, f.Path); n != 0 || b != 0 {
				t.Errorf("fetching a present file cost %d requests and %d bytes, want none", n, b)
			}
			if len(srv.Log()) != 0 {
				t.Errorf("fetching a present file sent %d requests to the registry, want none", len(srv.Log()))
			}
			if len(last.Files) != 1 || last.Files[0].State != Present || last.BytesDone != int64(len(content)) {
				t.Errorf("progress of a present file: %+v", last)
			}
		})
	}
}

func TestFetchRetriesWhatIsWorthRetrying(t *testing.T) {
	const size = 1 << 20
	for _, tc := range []struct {
		name       string
		fault      func(srv *hubtest.Server, p string)
		maxRetries int
		wantErr    string // "" for success
		requests   int
		servedLo   int64
		servedHi   int64
	}{
		{
			name:     "500 twice, then the file",
			fault:    func(srv *hubtest.Server, p string) { srv.FailNext(repoID, p, 500, 2) },
			requests: 3, servedLo: size, servedHi: size,
		},
		{
			name:     "429, then the file",
			fault:    func(srv *hubtest.Server, p string) { srv.FailNext(repoID, p, 429, 1) },
			requests: 2, servedLo: size, servedHi: size,
		},
		{
			name:     "cut twice, resumed twice",
			fault:    func(srv *hubtest.Server, p string) { srv.CutNext(repoID, p, size/3, 2) },
			requests: 3, servedLo: size, servedHi: size + slack,
		},
		{
			name: "200 to a Range request starts over",
			fault: func(srv *hubtest.Server, p string) {
				srv.CutNext(repoID, p, size*4/10, 1)
				srv.IgnoreRange(repoID, p, true)
			},
			// The whole file again after 40% of it.
			requests: 2, servedLo: size + size*4/10, servedHi: size + size*4/10 + slack,
		},
		{
			name:       "503 more often than the retries allow",
			fault:      func(srv *hubtest.Server, p string) { srv.FailNext(repoID, p, 503, 10) },
			maxRetries: 2,
			wantErr: "tiny.gguf could not be fetched in 3 tries: {hub} answered 503 Service Unavailable for " + repoID +
				" (it is having trouble): try again later",
			requests: 3,
		},
		{
			name:     "403 is final",
			fault:    func(srv *hubtest.Server, p string) { srv.FailNext(repoID, p, 403, 1) },
			wantErr:  "{cdn}, where {hub} sent the download of " + repoID + " file tiny.gguf, answered 403 Forbidden",
			requests: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHub(t)
			content := randomish(size, 5)
			f := addFile(t, srv, "tiny.gguf", content)
			tc.fault(srv, f.Path)
			m := newMirror(t, srv, func(o *Options) {
				if tc.maxRetries != 0 {
					o.MaxRetries = tc.maxRetries
				}
			})

			paths, err := m.Fetch(context.Background(), []File{f}, nil)

			if n := srv.Requests(repoID, f.Path); n != tc.requests {
				t.Errorf("the registry answered %d requests for the file, want %d", n, tc.requests)
			}
			if tc.wantErr != "" {
				want := strings.NewReplacer("{hub}", strings.TrimPrefix(srv.URL(), "http://"),
					"{cdn}", strings.TrimPrefix(srv.CDNURL(), "http://")).Replace(tc.wantErr)
				if err == nil || err.Error() != want {
					t.Fatalf("Fetch: %v\nwant: %s", err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			mustHave(t, paths[0], content)
			served(t, srv, f.Path, tc.servedLo, tc.servedHi)
		})
	}
}

func TestFetchNoticesAStall(t *testing.T) {
	// hubtest's trickle sends a piece every 50ms: a 20ms stall timeout
	// fires between any two.
	const stall = 20 * time.Millisecond
	content := randomish(64<<10, 6)

	t.Run("a trickle that never recovers", func(t *testing.T) {
		srv := newHub(t)
		f := addFile(t, srv, "tiny.gguf", content)
		srv.Trickle(repoID, f.Path, 2000)
		m := newMirror(t, srv, func(o *Options) { o.StallTimeout, o.MaxRetries = stall, 2 })

		_, err := m.Fetch(context.Background(), []File{f}, nil)

		want := "tiny.gguf could not be fetched in 3 tries: no byte of tiny.gguf arrived for 20ms"
		if err == nil || err.Error() != want {
			t.Fatalf("Fetch: %v\nwant: %s", err, want)
		}
		// Under load a try may stall before it reaches the CDN at all.
		if n := srv.Requests(repoID, f.Path); n < 1 || n > 3 {
			t.Errorf("the CDN answered %d requests, want 1 to 3", n)
		}
	})

	t.Run("a stall is retried and the retry resumes", func(t *testing.T) {
		srv := newHub(t)
		f := addFile(t, srv, "tiny.gguf", content)
		srv.Trickle(repoID, f.Path, 2000)
		m := newMirror(t, srv, func(o *Options) { o.StallTimeout, o.MaxRetries = stall, 20 })
		cleared := make(chan struct{})
		go func() {
			defer close(cleared)
			for srv.Requests(repoID, f.Path) < 2 {
				time.Sleep(time.Millisecond)
			}
			srv.ClearFaults(repoID, f.Path)
		}()

		paths, err := m.Fetch(context.Background(), []File{f}, nil)
		<-cleared

		if err != nil {
			t.Fatalf("Fetch: %v", err)
		}
		mustHave(t, paths[0], content)
		if n := srv.Requests(repoID, f.Path); n < 2 {
			t.Errorf("the registry answered %d requests, want a retry after the stall", n)
		}
		// The trickle sent a few hundred bytes; a retry that started over
		// would not ask for a range.
		log := srv.Log()
		if last := log[len(log)-1]; last.Server != "cdn" || !strings.HasPrefix(last.Range, "bytes=") {
			t.Errorf("the last request was %+v, want a range from where the stalled try stopped", last)
		}
		served(t, srv, f.Path, int64(len(content)), int64(len(content))+16<<10)
	})
}

func TestFetchRefusesWhatWillNotFit(t *testing.T) {
	const size = 4_700_000_000 // 4.7 GB; the check wants 5% more
	for _, tc := range []struct {
		name    string
		partial int64 // bytes already fetched
		free    uint64
		want    string
	}{
		{name: "nothing fetched yet", free: 2_100_000_000, want: "the mirror's disk needs 4.9 GB free to fetch tiny, and has 2.1 GB: free some space (the mirror page removes files), or give --data a larger disk"},
		{name: "a partial file counts", partial: 3e9, free: 1_500_000_000, want: "the mirror's disk needs 1.8 GB free to fetch tiny, and has 1.5 GB: free some space (the mirror page removes files), or give --data a larger disk"},
		{name: "small figures in a unit that fits", partial: size - 1e6, free: 300e3, want: "the mirror's disk needs 1.1 MB free to fetch tiny, and has 300 KB: free some space (the mirror page removes files), or give --data a larger disk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHub(t)
			// Generated and never read: the sha256 is given so that
			// hubtest does not hash 4.7 GB.
			commit := srv.AddFileSpec(repoID, hubtest.FileSpec{Path: "tiny.gguf", Size: size,
				Gen: hubtest.Pattern(7), SHA256: strings.Repeat("ab", 32)})
			f := hubFile(srv, commit, "tiny.gguf", size, strings.Repeat("ab", 32))
			var asked string
			m := newMirror(t, srv, func(o *Options) {
				o.FreeSpace = func(dir string) (uint64, error) { asked = dir; return tc.free, nil }
			})
			var before []string
			if tc.partial > 0 {
				part := filepath.Join(m.dir, model, f.Revision, "tiny.gguf.partial")
				if err := os.MkdirAll(filepath.Dir(part), 0o755); err != nil {
					t.Fatal(err)
				}
				// Sparse: no real 3 GB written.
				if err := os.WriteFile(part, nil, 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Truncate(part, tc.partial); err != nil {
					t.Fatal(err)
				}
			}
			before = files(t, m.dir)

			_, err := m.Fetch(context.Background(), []File{f}, nil)

			if err == nil || err.Error() != tc.want {
				t.Fatalf("Fetch: %v\nwant: %s", err, tc.want)
			}
			if asked != m.dir {
				t.Errorf("the free space of %q was asked for, want the mirror's %q", asked, m.dir)
			}
			if after := files(t, m.dir); !slices.Equal(after, before) {
				t.Errorf("a refused fetch changed the mirror from %q to %q", before, after)
			}
			if len(srv.Log()) != 0 {
				t.Errorf("a refused fetch sent %d requests to the registry", len(srv.Log()))
			}
		})
	}
}

func TestFetchRefusesBadNames(t *testing.T) {
	srv := newHub(t)
	good := addFile(t, srv, "tiny.gguf", []byte("gguf"))
	for _, tc := range []struct {
		name string
		edit func(f *File)
		want string // part of the error
	}{
		{"model climbs out", func(f *File) { f.Model = "../x" }, `"../x" is not a model name`},
		{"model in capitals", func(f *File) { f.Model = "Tiny" }, `"Tiny" is not a model name`},
		{"revision is a branch", func(f *File) { f.Revision = "main" }, `"main" is not a revision`},
		{"revision climbs out", func(f *File) { f.Revision = "../abcdef1" }, `is not a revision`},
		{"path climbs out", func(f *File) { f.Path = "../x" }, "climbs out of its folder"},
		{"path climbs out later", func(f *File) { f.Path = "a/../../x" }, "climbs out of its folder"},
		{"absolute path", func(f *File) { f.Path = "/abs" }, "starts at the root"},
		{"backslash", func(f *File) { f.Path = `a\b` }, "has a backslash"},
		{"NUL", func(f *File) { f.Path = "a\x00b" }, "has a control character"},
		{"empty folder", func(f *File) { f.Path = "a//b" }, "has an empty folder name"},
		{"a partial file's name", func(f *File) { f.Path = "x.gguf.partial" }, "keeps for its own bookkeeping"},
		{"a sidecar's name", func(f *File) { f.Path = ".x.gguf.sha256" }, "keeps for its own bookkeeping"},
		{"sha256 too short", func(f *File) { f.SHA256 = "abc" }, "which is not a sha256"},
		{"not http", func(f *File) { f.URL = "ftp://example.com/x" }, "fetches http, https and file URLs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMirror(t, srv, nil)
			bad := good
			tc.edit(&bad)
			// The bad file comes second: nothing of the good one may be
			// fetched either.
			_, err := m.Fetch(context.Background(), []File{good, bad}, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Fetch: %v\nwant an error saying %q", err, tc.want)
			}
			if entries, _ := os.ReadDir(m.dir); len(entries) != 0 {
				t.Errorf("a refused fetch wrote %d entries in the mirror", len(entries))
			}
			if _, err := m.LocalPath(bad.Model, bad.Revision, bad.Path); err == nil && !strings.Contains(tc.want, "sha256") && !strings.Contains(tc.want, "URL") {
				t.Errorf("LocalPath accepted %q %q %q", bad.Model, bad.Revision, bad.Path)
			}
		})
	}
	if len(srv.Log()) != 0 {
		t.Errorf("refused fetches sent %d requests to the registry", len(srv.Log()))
	}
}

func TestFetchFromALocalFolder(t *testing.T) {
	content := randomish(1<<20, 8)
	for _, tc := range []struct {
		name    string
		partial []byte // left in the mirror before the fetch
		sum     string
		wantErr string
	}{
		{name: "whole file", sum: sha(content)},
		{name: "resumed from a partial file", partial: content[:400<<10], sum: sha(content)},
		{name: "changed since it was listed", sum: sha([]byte("other")),
			wantErr: fmt.Sprintf("model.gguf arrived with sha256 %s, and the registry published %s", sha(content)[:12], sha([]byte("other"))[:12])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			src := filepath.Join(root, "tiny-model", "weights", "model.gguf")
			if err := os.MkdirAll(filepath.Dir(src), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(src, content, 0o644); err != nil {
				t.Fatal(err)
			}
			u := hf.NewLocal(root, "").DownloadURL("local/tiny-model", "", "weights/model.gguf")
			if !strings.HasPrefix(u, "file://") {
				t.Fatalf("the local registry's URL is %q, want a file URL", u)
			}
			f := File{Model: model, Revision: "0123abc", Path: "weights/model.gguf", URL: u, Size: int64(len(content)), SHA256: tc.sum}
			m := newMirror(t, nil, nil) // no registry: file URLs are read all the same
			if tc.partial != nil {
				part := filepath.Join(m.dir, model, f.Revision, "weights", "model.gguf.partial")
				os.MkdirAll(filepath.Dir(part), 0o755)
				if err := os.WriteFile(part, tc.partial, 0o644); err != nil {
					t.Fatal(err)
				}
			}

			paths, err := m.Fetch(context.Background(), []File{f}, nil)

			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Fetch: %v\nwant: %s", err, tc.wantErr)
				}
				if left := files(t, m.dir); len(left) != 0 {
					t.Errorf("a failed fetch left %q", left)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			mustHave(t, paths[0], content)
		})
	}
}

// A partial file may be anything a crash or an older process left: what the
// mirror does with it decides how many bytes the registry serves again.
func TestFetchContinuesWhatIsOnDisk(t *testing.T) {
	const size = 1 << 20
	content := randomish(size, 9)
	for _, tc := range []struct {
		name     string
		partial  []byte // nil: none
		final    []byte // the file itself, without a sidecar; nil: none
		requests int
		served   int64
		wantErr  string
	}{
		{name: "40% left by a crash", partial: content[:size*4/10], requests: 1, served: size - size*4/10},
		{name: "longer than the file", partial: append(slices.Clone(content), 1, 2, 3), requests: 1, served: size},
		{name: "whole, not yet renamed", partial: content, requests: 0, served: 0},
		{name: "wrong bytes", partial: randomish(size/2, 99), requests: 1, served: size - size/2,
			wantErr: "arrived with sha256"},
		{name: "in place without its sidecar", final: content, requests: 0, served: 0},
		{name: "in place but another file", final: randomish(size, 98), requests: 1, served: size},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHub(t)
			f := addFile(t, srv, "tiny.gguf", content)
			m := newMirror(t, srv, nil)
			local, _ := m.LocalPath(f.Model, f.Revision, f.Path)
			os.MkdirAll(filepath.Dir(local), 0o755)
			if tc.partial != nil {
				os.WriteFile(local+".partial", tc.partial, 0o644)
			}
			if tc.final != nil {
				os.WriteFile(local, tc.final, 0o644)
			}

			_, err := m.Fetch(context.Background(), []File{f}, nil)

			if n := srv.Requests(repoID, f.Path); n != tc.requests {
				t.Errorf("the registry answered %d requests, want %d", n, tc.requests)
			}
			served(t, srv, f.Path, tc.served, tc.served)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Fetch: %v\nwant an error saying %q", err, tc.wantErr)
				}
				if _, err := os.Stat(local + ".partial"); !os.IsNotExist(err) {
					t.Errorf("the partial file with wrong bytes was kept")
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			mustHave(t, local, content)
			if sum, err := readSidecar(local); err != nil || sum != f.SHA256 {
				t.Errorf("the sidecar says %q (%v), want %s", sum, err, f.SHA256)
			}
		})
	}
}

func TestProgressWhileFetching(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 11)
	f := addFile(t, srv, "tiny.gguf", content)
	srv.Trickle(repoID, f.Path, 4<<20) // about 250ms
	m := newMirror(t, srv, func(o *Options) { o.ProgressEvery = 20 * time.Millisecond })

	var reports []Progress
	var midway []Entry
	start := time.Now()
	_, err := m.Fetch(context.Background(), []File{f}, func(p Progress) {
		reports = append(reports, p)
		if p.BytesDone > 0 && p.BytesDone < p.BytesTotal && midway == nil {
			midway, _ = m.List(context.Background())
		}
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}

	sawPart := false
	for _, p := range reports {
		if p.BytesTotal != int64(len(content)) || len(p.Files) != 1 {
			t.Fatalf("a report: %+v", p)
		}
		if fp := p.Files[0]; fp.State == Fetching && fp.BytesDone > 0 && fp.BytesDone < fp.BytesTotal {
			sawPart = true
		}
	}
	if !sawPart {
		t.Errorf("no report showed the file part-fetched: %+v", reports)
	}
	if max := int(took/(20*time.Millisecond)) + 2; len(reports) > max {
		t.Errorf("%d reports in %v, want at most %d (one per 20ms and the last)", len(reports), took, max)
	}
	if last := reports[len(reports)-1]; last.Files[0].State != Present || last.BytesDone != last.BytesTotal {
		t.Errorf("the last report: %+v, want the file present", last)
	}
	if len(midway) != 1 || midway[0].State != Fetching || midway[0].BytesTotal != int64(len(content)) || midway[0].BytesDone == 0 {
		t.Errorf("List while fetching: %+v, want the file being fetched", midway)
	}
}

func TestTokenNeverReachesTheCDN(t *testing.T) {
	for _, tc := range []struct {
		name    string
		token   string
		wantErr string
	}{
		{name: "with a granted token", token: "hf_granted"},
		{name: "without a token", wantErr: "acme/gated is gated: set HF_TOKEN (or --hf-token) to a token of an account " +
			"that has been granted access to it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := hubtest.New(t)
			srv.AddRepo("acme/gated", hubtest.RepoOptions{Gated: "manual"})
			srv.AddToken("hf_granted", "acme/gated")
			content := randomish(256<<10, 12)
			commit := srv.AddFile("acme/gated", "tiny.gguf", content)
			f := hubFile(srv, commit, "tiny.gguf", int64(len(content)), sha(content))
			f.URL = strings.Replace(f.URL, repoID, "acme/gated", 1)
			m := newMirror(t, nil, func(o *Options) { o.Registry = mustClient(t, srv, tc.token) })

			paths, err := m.Fetch(context.Background(), []File{f}, nil)

			if srv.CDNSawAuthorization() {
				t.Errorf("the CDN was sent the token")
			}
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr || !errors.Is(err, hf.ErrGated) {
					t.Fatalf("Fetch: %v\nwant: %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			mustHave(t, paths[0], content)
			hubSaw := false
			for _, r := range srv.Log() {
				hubSaw = hubSaw || (r.Server == "hub" && r.Authorization == "Bearer "+tc.token)
			}
			if !hubSaw {
				t.Errorf("the Hub never saw the token: the test proves nothing")
			}
		})
	}
}

// Fetch returns at once when its context ends, and leaves nothing running.
func TestFetchStopsWhenCancelled(t *testing.T) {
	srv := newHub(t)
	content := randomish(1<<20, 13)
	f := addFile(t, srv, "tiny.gguf", content)
	srv.Trickle(repoID, f.Path, 64<<10) // 16 s for the whole file
	m := newMirror(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()

	start := time.Now()
	// Named twice, as a careless caller might: still one fetch to stop.
	var last Progress
	_, err := m.Fetch(ctx, []File{f, f}, func(p Progress) { last = p })

	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Fetch: %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Fetch took %v to stop after its context ended", took)
	}
	m.mu.Lock()
	left := len(m.flights)
	m.mu.Unlock()
	if left != 0 {
		t.Errorf("%d fetches still running after Fetch returned", left)
	}
	entries, _ := m.List(context.Background())
	if len(entries) != 1 || entries[0].State != Partial || entries[0].BytesDone == 0 {
		t.Errorf("List after a cancelled fetch: %+v, want one partial file", entries)
	}
	for _, fp := range last.Files {
		if fp.State != Partial || fp.BytesDone == 0 || fp.BytesDone != entries[0].BytesDone {
			t.Errorf("the last report of a cancelled fetch: %+v, want the file partial as on disk", last)
		}
	}
}

// TestFetchesUnderWayHoldTheirRoom: two fetches that each fit the free disk
// alone do not both start: the second counts what the first will still
// write, and is refused before a byte, saying so; once the first is done,
// its file no longer needs the room and the second fits what is left.
func TestFetchesUnderWayHoldTheirRoom(t *testing.T) {
	const size = 256 << 10
	srv := newHub(t)
	a := addFile(t, srv, "a.gguf", randomish(size, 21))
	b := addFile(t, srv, "b.gguf", randomish(size, 22))
	srv.Trickle(repoID, a.Path, 1<<20) // a quarter of a second
	free := uint64(size * 3 / 2)       // one file, not two
	m := newMirror(t, srv, func(o *Options) {
		o.FreeSpace = func(string) (uint64, error) { return free, nil }
	})

	done := make(chan error, 1)
	go func() { _, err := m.Fetch(context.Background(), []File{a}, nil); done <- err }()
	for deadline := time.Now().Add(5 * time.Second); srv.BytesServed(repoID, a.Path) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the first fetch never started")
		}
		time.Sleep(time.Millisecond)
	}

	_, err := m.Fetch(context.Background(), []File{b}, nil)
	if err == nil || !strings.Contains(err.Error(), "once the") || !strings.Contains(err.Error(), "the fetches under way will still write are set aside") {
		t.Fatalf("the second fetch: %v; want it refused for the room the first holds", err)
	}
	if n := srv.Requests(repoID, b.Path); n != 0 {
		t.Errorf("the refused fetch asked the registry %d times", n)
	}
	if err := <-done; err != nil {
		t.Fatalf("the first fetch: %v", err)
	}
	// Done, a's bytes are on the disk: what is free now is what is left.
	free = size * 3 / 2
	if _, err := m.Fetch(context.Background(), []File{b}, nil); err != nil {
		t.Errorf("with the first fetch done, the second: %v", err)
	}
}
