package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"modelserve/internal/testkit"
)

// The router semantics llama.cpp's router tests hold, through the real
// binary and the real engine, in memory for one tiny model at a time
// (startSwapWorld): those not in swap_test.go.

// longStream is a long answer of model's, its first chunk read: the
// replica answering it is busy until it is read to its end.
func longStream(t *testing.T, c openai.Client, model string) *ssestream.Stream[openai.ChatCompletionChunk] {
	t.Helper()
	st := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(1024), // its longest answer (max_output)
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long answer")}}, option.WithJSONSet("ignore_eos", true))
	t.Cleanup(func() { st.Close() })
	if !st.Next() {
		t.Fatalf("%s's stream gave no first chunk: %v", model, st.Err())
	}
	return st
}

// drain reads st to its end.
func drain(t *testing.T, st *ssestream.Stream[openai.ChatCompletionChunk]) {
	t.Helper()
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Errorf("the long stream: %v", err)
	}
}

// waitPlacement waits until model's placement in GET /api/v1/replicas
// says what.
func (s *apiServer) waitPlacement(model, what string) {
	s.t.Helper()
	var v struct {
		Models []struct {
			Model     string `json:"model"`
			Placement string `json:"placement"`
		} `json:"models"`
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		s.do("GET", "/api/v1/replicas", nil, &v)
		for _, m := range v.Models {
			if m.Model == model && strings.Contains(m.Placement, what) {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s's placement never said %q: %+v", model, what, v.Models)
		}
	}
}

type answer struct {
	err error
	at  time.Time
}

func ask(c openai.Client, model, text string, out chan<- answer) {
	err := askModel(c, model, text)
	out <- answer{err, time.Now()}
}

// TestTwoWaitersForTheSameRoomAreBothServed: beta, then gamma, asked while
// alpha answers a long stream; both need the room alpha holds. Once the
// stream ends both are answered, beta first, as they came.
func TestTwoWaitersForTheSameRoomAreBothServed(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha", "beta", "gamma")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	st := longStream(t, c, "alpha")
	beta, gamma := make(chan answer, 1), make(chan answer, 1)
	go ask(c, "beta", "first to wait", beta)
	s.waitPlacement("beta", "waiting for alpha-1")
	go ask(c, "gamma", "second to wait", gamma)
	s.waitPlacement("gamma", "waiting for alpha-1")
	drain(t, st)
	var got [2]answer
	for i, ch := range []chan answer{beta, gamma} {
		select {
		case got[i] = <-ch:
		case <-time.After(time.Minute):
			t.Fatalf("the %s waiter was not answered within a minute of alpha's answer ending", []string{"beta", "gamma"}[i])
		}
	}
	if got[0].err != nil || got[1].err != nil {
		t.Fatalf("beta: %v; gamma: %v; want both answered", got[0].err, got[1].err)
	}
	if got[1].at.Before(got[0].at) {
		t.Errorf("gamma, asked after beta, was answered %s before it", got[0].at.Sub(got[1].at))
	}
}

// TestAClientThatGivesUpWhileWaitingCostsNothing: a request for beta
// waiting for alpha's room goes away before alpha's answer ends; alpha is
// not given back for it, and no engine of beta starts.
func TestAClientThatGivesUpWhileWaitingCostsNothing(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha", "beta")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	st := longStream(t, c, "alpha")
	ctx, giveUp := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "beta", MaxTokens: openai.Int(4),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("impatient")}})
		gone <- err
	}()
	s.waitPlacement("beta", "waiting for alpha-1")
	giveUp()
	if err := <-gone; !errors.Is(err, context.Canceled) {
		t.Fatalf("the request that gave up: %v; want it cancelled", err)
	}
	drain(t, st)
	time.Sleep(time.Second) // passes in which alpha, idle now, must stay
	v := s.fleet()
	if v.running("alpha") != 1 || len(v.Replicas) != 1 || v.starts("beta") != 0 {
		t.Errorf("after beta's client gave up: %+v, %d starts of beta; want alpha alone loaded and no beta started", v.Replicas, v.starts("beta"))
	}
	if err := askModel(c, "alpha", "still loaded"); err != nil {
		t.Errorf("alpha afterwards: %v", err)
	}
}

// TestARequestForAStoppingReplicaWaitsForANewOne: an operator stops
// alpha-1 while it streams; it drains, and a request for alpha arriving
// meanwhile (no other replica, and no room for one until alpha-1 has gone)
// waits for alpha-2 and is answered: no refused connection, no 502.
func TestARequestForAStoppingReplicaWaitsForANewOne(t *testing.T) {
	s, c, _ := startSwapWorld(t, "alpha")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	st := longStream(t, c, "alpha")
	if code := s.do("POST", "/api/v1/replicas/alpha-1/stop", nil, nil); code != http.StatusOK && code != http.StatusAccepted && code != http.StatusNoContent {
		t.Fatalf("stopping alpha-1: %d", code)
	}
	got := make(chan answer, 1)
	go ask(c, "alpha", "while alpha-1 drains", got)
	s.waitPlacement("alpha", "waiting for alpha-1 to stop")
	drain(t, st)
	select {
	case a := <-got:
		if a.err != nil {
			t.Fatalf("the request that came while alpha-1 stopped: %v; want it answered by a new replica", a.err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the request that came while alpha-1 stopped was not answered within a minute")
	}
	// A start is kept once its figures are read, a moment after the
	// replica is ready and answers.
	n := 0
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if n = s.fleet().starts("alpha"); n == 2 || time.Now().After(deadline) {
			break
		}
	}
	if n != 2 {
		t.Errorf("%d starts of alpha; want alpha-2 started for the request", n)
	}
}

// TestAModelAskedAgainAndAgainDoesNotStarveAWaitingOne: six clients ask
// alpha back to back, so its replica is never idle; a request for beta,
// which needs alpha's room, is answered within seconds all the same (alpha
// is given back once the answers it has end), and so is every request for
// alpha, those that came after beta's waiting for alpha's next replica.
func TestAModelAskedAgainAndAgainDoesNotStarveAWaitingOne(t *testing.T) {
	_, c, _ := startSwapWorld(t, "alpha", "beta")
	if err := askModel(c, "alpha", "load alpha"); err != nil {
		t.Fatal(err)
	}
	const clients = 6 // never all between requests at once: alpha is never idle
	stop := make(chan struct{})
	errs := make(chan error, clients)
	var answers atomic.Int64
	for range clients {
		go func() {
			var first error
			for end := time.Now().Add(15 * time.Second); time.Now().Before(end); { // bounded, whatever happens
				select {
				case <-stop:
					errs <- first
					return
				default:
				}
				err := askModel(c, "alpha", "again")
				if err != nil && first == nil {
					first = err
				}
				answers.Add(1)
			}
			errs <- first
		}()
	}
	// Alpha busy, back to back: each client answered and asking again.
	testkit.WaitFor(t, 30*time.Second, "alpha answering its clients", func() (bool, string) {
		n := answers.Load()
		return n >= clients, fmt.Sprint(n, " requests for alpha ended")
	})
	began := time.Now()
	err := askModel(c, "beta", "while alpha is asked again and again")
	took := time.Since(began)
	close(stop)
	for range clients {
		if err := <-errs; err != nil {
			t.Errorf("a request for alpha: %v", err)
		}
	}
	if err != nil {
		t.Fatalf("beta, asked while alpha was asked again and again: %v", err)
	}
	if took > 5*time.Second {
		t.Errorf("beta waited %s for alpha's room; want it given back once its answers end", took)
	}
	t.Logf("beta answered after %s", took.Round(time.Millisecond))
}
