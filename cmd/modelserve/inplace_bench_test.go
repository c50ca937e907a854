package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"modelserve/internal/fleet"
	"modelserve/jobs"
)

// benchClients is how many clients stream chatty's requests throughout.
const benchClients = 8

// chattySlots is how many requests chatty's engine answers at once: the
// update world serves it with a pool of 2048 tokens in slots of 1024.
const chattySlots = 2048 / 1024

// BenchmarkUpdateInPlaceUnderLoad: one machine with room for one copy of
// chatty (--local-memory), 8 clients streaming its requests throughout an
// update tried in place and promoted, then a restore of the old version in
// place, through the real binary and the real engine. Every request is to
// be answered: a failed one fails the benchmark. Each client's longest
// wait (from sending a request to its first token) is reported beside
// the engine's measured load time (the fleet's start history) and the
// bound it is held to: one load, plus the answers queued ahead of it (the
// other clients' answers, chattySlots at a time, at the longest answer's
// time before the trial), plus the drain of the answer in flight.
func BenchmarkUpdateInPlaceUnderLoad(b *testing.B) {
	for range b.N {
		w := newRoomForOne(b)
		c := openai.NewClient(option.WithBaseURL(w.s.base+"/v1/"), option.WithAPIKey(w.s.token), option.WithMaxRetries(0),
			option.WithRequestTimeout(3*time.Minute))
		// Before the trial: how long an answer takes with every client
		// asking.
		steady := streamChatty(c, benchClients)
		time.Sleep(2 * time.Second)
		calm := steady.end()
		if len(calm.failed) > 0 {
			b.Fatalf("%d requests failed before the trial: %v", len(calm.failed), calm.failed)
		}

		began := time.Now()
		ld := streamChatty(c, benchClients)
		time.Sleep(time.Second)
		updated := w.updateInPlace(b)
		time.Sleep(time.Second)
		restored := w.restore(b, w.version(b, w.served).ID)
		time.Sleep(time.Second)
		got := ld.end()
		for _, j := range []jobs.Job{updated, restored} {
			if j.State != jobs.Done {
				b.Fatalf("the %s ended %s: %q\n%+v", j.Kind, j.State, j.Error, j.Steps)
			}
		}

		var starts struct{ Starts []fleet.Start }
		w.s.do("GET", "/api/v1/replicas", nil, &starts)
		var load time.Duration
		loads := 0
		for _, st := range starts.Starts {
			if st.Model == "chatty" && st.Started.After(began) {
				load, loads = max(load, st.ReadyAt.Sub(st.Started)), loads+1
			}
		}
		bound := load + time.Duration(benchClients/chattySlots+1)*calm.longestAnswer
		longest := slices.Max(got.longestWait)
		b.Logf("%d requests from %d clients through an update in place and a restore in place, %d failed; "+
			"%d loads of chatty, the longest %s; an answer took at most %s before the trial; longest wait %s against a bound of %s (%.2f×)",
			got.sent, benchClients, len(got.failed), loads, load.Round(time.Millisecond), calm.longestAnswer.Round(time.Millisecond),
			longest.Round(time.Millisecond), bound.Round(time.Millisecond), float64(longest)/float64(bound))
		for i, d := range got.longestWait {
			b.Logf("  client %d: longest wait %s (%.2f× a load)", i, d.Round(time.Millisecond), float64(d)/float64(max(load, time.Millisecond)))
		}
		if len(got.failed) > 0 {
			b.Errorf("%d of %d requests failed: %v", len(got.failed), got.sent, got.failed)
		}
		if loads < 2 {
			b.Errorf("%d loads of chatty measured during the run; want one for the update and one for the restore", loads)
		}
		b.ReportMetric(float64(len(got.failed)), "errors")
		b.ReportMetric(float64(longest.Milliseconds()), "longest-wait-ms")
		b.ReportMetric(float64(load.Milliseconds()), "one-load-ms")
		b.ReportMetric(float64(longest)/float64(bound), "wait/bound")
	}
}

// streaming is clients streaming chatty's requests until end.
type streaming struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	streamed
}

// streamed is what the clients saw: how many requests they sent, which
// failed, each client's longest wait for a first token, and the longest
// answer, from sending to its last token.
type streamed struct {
	sent          int
	failed        []string
	longestWait   []time.Duration
	longestAnswer time.Duration
}

func streamChatty(c openai.Client, clients int) *streaming {
	s := &streaming{stop: make(chan struct{}), streamed: streamed{longestWait: make([]time.Duration, clients)}}
	for i := range clients {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for n := 0; n < maxLoad; n++ {
				select {
				case <-s.stop:
					return
				default:
				}
				wait, took, err := streamOnce(c, i, n)
				s.mu.Lock()
				s.sent++
				if err != nil {
					s.failed = append(s.failed, err.Error())
				} else {
					s.longestWait[i] = max(s.longestWait[i], wait)
					s.longestAnswer = max(s.longestAnswer, took)
				}
				s.mu.Unlock()
			}
		}()
	}
	return s
}

// end stops the clients and says what they saw.
func (s *streaming) end() streamed {
	close(s.stop)
	s.wg.Wait()
	return s.streamed
}

// streamOnce is client i's n-th request, streamed: how long its first
// token took, and its whole answer.
func streamOnce(c openai.Client, i, n int) (wait, took time.Duration, err error) {
	params := openai.ChatCompletionNewParams{Model: "chatty", MaxTokens: openai.Int(16),
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(fmt.Sprintf("client %d says %d", i, n))}}
	start := time.Now()
	st := c.Chat.Completions.NewStreaming(context.Background(), params)
	defer st.Close()
	chunks := 0
	for st.Next() {
		if chunks == 0 {
			wait = time.Since(start)
		}
		chunks++
	}
	if err := st.Err(); err != nil {
		return 0, 0, err
	}
	if chunks == 0 {
		return 0, 0, errors.New("a stream with no chunk")
	}
	return wait, time.Since(start), nil
}
