package fleetsuite_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"modelserve/catalog"
	"modelserve/internal/fleet"
	"modelserve/internal/testkit"
)

// big is a replica's memory such that a node (nodeRAM, less the
// headroom) has room for one of them and no more.
const big = 5 << 30

// sized is b.model with ram bytes of memory.
func (b *backend) sized(name string, min, max int, ram int64) catalog.Model {
	m := b.model(name, min, max)
	m.Profiles[0].RAMBytes = ram
	return m
}

// health is model's health as the fleet says it.
func (b *backend) health(model string) (fleet.ModelHealth, bool) {
	for _, h := range b.fleet.ModelHealth() {
		if h.Model == model {
			return h, true
		}
	}
	return fleet.ModelHealth{}, false
}

// streaming is a long answer being written by one replica, as a client
// the gateway sent there waits for it.
type streaming struct {
	replica fleet.Replica
	done    chan answer
}

// stream has model's one served replica write a long answer
// (answerTokens), asked of the fleet and held as the gateway does, and
// returns once it is being written.
func (b *backend) stream(t *testing.T, model string) *streaming {
	t.Helper()
	return b.streamOn(t, b.ready(t, model, 1)[0])
}

// streamOn is stream on replica r.
func (b *backend) streamOn(t *testing.T, r fleet.Replica) *streaming {
	t.Helper()
	asked := time.Now()
	release := b.fleet.Use(r.Model, 1, asked)
	held, ok := b.fleet.Hold(r.ID, asked)
	if !ok {
		release()
		t.Fatalf("replica %s was not held for a request", r.ID)
	}
	s := &streaming{replica: r, done: make(chan answer, 1)}
	go func() {
		a := b.send(r, b.fleet.EngineKey(r.ID), answerTokens)
		held()
		release()
		s.done <- a
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case a := <-s.done:
		t.Fatalf("the long answer of %s ended at once (%s): it must be longer", r.ID, a)
	default:
	}
	return s
}

// whole waits for the long answer and fails t unless it was written
// whole: every token it asked for.
func (s *streaming) whole(t *testing.T) {
	t.Helper()
	var a answer
	select {
	case a = <-s.done:
	case <-time.After(3 * time.Minute):
		t.Fatalf("the long answer of %s did not end within 3 minutes", s.replica.ID)
	}
	var completion struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if !a.ok() {
		t.Errorf("the long answer of %s: %s", s.replica.ID, a)
	} else if err := json.Unmarshal([]byte(a.body), &completion); err != nil || completion.Usage.CompletionTokens != answerTokens {
		t.Errorf("the long answer of %s has %d of %d tokens (%v)", s.replica.ID, completion.Usage.CompletionTokens, answerTokens, err)
	}
}

// clients are n clients asking model for short answers, one after the
// other each, until stopped.
type clients struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	answers []answer
}

func (b *backend) clients(t *testing.T, model string, n int) *clients {
	c := &clients{stop: make(chan struct{})}
	for range n {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for {
				select {
				case <-c.stop:
					return
				default:
				}
				a := b.ask(t, model, 8)
				c.mu.Lock()
				c.answers = append(c.answers, a)
				c.mu.Unlock()
			}
		}()
	}
	return c
}

// failed stops the clients, and says how many of their requests were
// answered and which failed.
func (c *clients) failed() (answered int, failed []answer) {
	close(c.stop)
	c.wg.Wait()
	for _, a := range c.answers {
		if !a.ok() {
			failed = append(failed, a)
		}
	}
	return len(c.answers), failed
}

// noneFailed stops the clients and fails t unless they were answered
// at least once each and every request of theirs was: 0 failed.
func (c *clients) noneFailed(t *testing.T, what string) {
	t.Helper()
	n, failed := c.failed()
	if len(failed) > 0 {
		t.Errorf("%d of %d requests %s failed: %v", len(failed), n, what, failed)
	}
	if n == 0 {
		t.Errorf("no request %s was answered", what)
	}
}

// gone waits for model to have no replica of any state.
func (b *backend) gone(t *testing.T, model, why string) {
	t.Helper()
	testkit.WaitFor(t, 2*time.Minute, model+"'s replica to go, "+why, func() (bool, string) {
		rs := b.replicas(model)
		return len(rs) == 0, fmt.Sprint(rs)
	})
}
