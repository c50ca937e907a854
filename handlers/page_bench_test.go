package handlers_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkJobPageFirstByte is the time from asking for a job's page to its
// first byte, with 10,000 jobs (70,000 steps) in the database, through the
// real mux, session and all, over loopback HTTP. The target is under 20 ms.
func BenchmarkJobPageFirstByte(b *testing.B) {
	e := newConsoleEnv(b)
	tx, err := e.db.Begin()
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now().Add(-30 * 24 * time.Hour)
	var id string
	for i := range 10000 {
		id = fmt.Sprintf("serve-%d-%08x", start.Unix()+int64(i), i)
		insertJob(b, tx, doneJob(id, start.Add(time.Duration(i)*time.Minute)))
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	br := e.signedIn()
	first := make([]byte, 1)
	for b.Loop() {
		resp := br.get("/jobs/" + id)
		if _, err := io.ReadFull(resp.Body, first); err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %v", resp.Status, err)
		}
		resp.Body.Close()
	}
}

// BenchmarkJobsPage is the first page of the list with 10,000 jobs.
func BenchmarkJobsPage(b *testing.B) {
	e := newConsoleEnv(b)
	tx, _ := e.db.Begin()
	start := time.Now().Add(-30 * 24 * time.Hour)
	for i := range 10000 {
		insertJob(b, tx, doneJob(fmt.Sprintf("serve-%d-%08x", start.Unix()+int64(i), i), start.Add(time.Duration(i)*time.Minute)))
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	br := e.signedIn()
	// The second page, by its cursor: the 25th newest job.
	second := "/jobs?before=" + fmt.Sprintf("serve-%d-%08x", start.Unix()+9975, 9975)
	for b.Loop() {
		resp := br.get(second)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("%s: %s", second, resp.Status)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
