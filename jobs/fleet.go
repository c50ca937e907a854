package jobs

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/attribute"
	"strings"
	"time"

	"modelserve/internal/chat"
	"modelserve/internal/fleet"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// Fleet is what a job watches once its model is in the catalog: the
// replicas that run, and how each model fares, in the fleet's own types
// (either backend).
type Fleet interface {
	Replicas() []fleet.Replica
	ModelHealth() []fleet.ModelHealth
}

// errBusy is a model the cluster has the hardware for, all of it in use now.
var errBusy = errors.New("the hardware it fits is in use")

// waitReady waits for a replica of the model to serve, saying what it is
// doing, and gives up early when it cannot be placed or keeps failing. A
// canary (req.CanaryOf) that has no room beside its model fails rather than
// waits: its trial would never begin, and the update would hold on to a
// version that never runs.
func (s *Server) waitReady(ctx context.Context, l *live, name string, hardware bool, req Request) (fleet.Replica, error) {
	s.step(l, StepPlacement, Running, "waiting for the fleet to place it")
	started := time.Now()
	deadline := started.Add(s.deps.ReadyTimeout)
	tick := time.NewTicker(s.deps.Poll)
	defer tick.Stop()
	for {
		if h, ok := s.health(name); ok {
			if h.Parked {
				return fleet.Replica{}, sentencef("it failed to start %s and is parked: %s", words.Plural(h.Failures, "once", fmt.Sprintf("%d times", h.Failures)), h.Reason)
			}
			if h.Unplaceable && !h.HardwareExists {
				return fleet.Replica{}, sentencef("no node can host it:\n%s", h.Placement)
			}
			// The grace runs from when this step began, not from the job:
			// the download before it can take hours, and the fleet may not
			// have looked at the new entry yet.
			if h.Unplaceable && time.Since(started) > s.deps.UnplacedGrace {
				if hardware && req.CanaryOf != "" {
					return fleet.Replica{}, noRoomBeside(req, "; what holds it:\n"+h.Placement+"\n")
				}
				if hardware {
					return fleet.Replica{}, operr.Wrap(operr.Unavailable, errBusy, "%s: it is in the catalog and starts when there is room, "+
						"with nothing more to do; what holds it now:\n%s", errBusy, h.Placement)
				}
				return fleet.Replica{}, sentencef("no node can host it:\n%s", h.Placement)
			}
		}
		for _, r := range s.deps.Fleet.Replicas() {
			if r.Model != name {
				continue
			}
			if r.State == fleet.Ready {
				s.annotate(l, StepPlacement, attribute.String("modelserve.replica", r.ID), attribute.String("modelserve.node", r.Node))
				s.step(l, StepPlacement, Done, fmt.Sprintf("%s ready on %s at %s", r.ID, r.Node, r.Endpoint))
				return r, nil
			}
			s.step(l, StepPlacement, Running, fmt.Sprintf("%s on %s is %s", r.ID, r.Node, r.State))
		}
		if time.Now().After(deadline) {
			return fleet.Replica{}, sentencef("no replica was ready after %s: the fleet's log for %s says why", s.deps.ReadyTimeout, name)
		}
		select {
		case <-ctx.Done():
			return fleet.Replica{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// health is how the fleet fares with the entry name.
func (s *Server) health(name string) (fleet.ModelHealth, bool) {
	for _, h := range s.deps.Fleet.ModelHealth() {
		if h.Model == name {
			return h, true
		}
	}
	return fleet.ModelHealth{}, false
}

// smoke asks the model for one short reply through the gateway, as a client
// would, and says what came back and how fast; loading is told how long
// the engine has said it is still loading the model, while it does.
func (s *Server) smoke(ctx context.Context, name string, embeddings bool, loading func(time.Duration)) (string, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.deps.SmokeTimeout)
	defer cancel()
	if embeddings {
		return s.smokeEmbeddings(ctx, name, loading)
	}
	// At temperature 0 with a seed: the same model says the same thing
	// on every run, so a second serve is no surprise and an empty answer
	// is the model's, not chance's.
	body := chat.Deterministic(name, 32, 42, chat.User("Say hello in one short sentence.")).Body()
	start := time.Now()
	b, err := s.ask(ctx, chat.CompletionsPath, body, loading)
	if err != nil {
		return "", 0, err
	}
	secs := time.Since(start).Seconds()
	out, ok := chat.ReadCompletion(b)
	if !ok {
		return "", 0, sentencef("the replica's answer was not a completion: %s", words.Clip(strings.TrimSpace(string(b))))
	}
	// The wall clock, as a client sees it: the prompt, the generation and
	// the way there. The engine's own figure counts the generation alone
	// and flattered a replica that took seconds to read the prompt.
	tps := 0.0
	if secs > 0 && out.Usage != nil {
		tps = float64(out.Usage.CompletionTokens) / secs
	}
	return strings.TrimSpace(out.Text()), tps, nil
}

// answered is the smoke test's sentence: how fast the model answered and,
// with withAnswer, what it said. An embedding model's reply is the size
// of its vector, never content.
func answered(reply string, tps float64, embeddings, withAnswer bool) string {
	switch {
	case embeddings:
		return "answered with " + reply
	case reply == "":
		// A blank where the answer goes read as a page that failed to
		// show it.
		return fmt.Sprintf("answered with no text, at %.1f tokens/s", tps)
	case withAnswer:
		return fmt.Sprintf("answered at %.1f tokens/s: %q", tps, reply)
	}
	return fmt.Sprintf("answered at %.1f tokens/s", tps)
}

// smokeReach is how long the smoke test asks again when no replica
// answered at all: a pod just made ready can be unreachable for a moment
// while its address is routed, and a replica that died is replaced
// within it.
const smokeReach = 30 * time.Second

// ask is the gateway's Ask, asked again each second while no replica
// answers at all, within smokeReach of the first, and while the engine
// says it is still loading the model, until ctx ends (the smoke test's
// limit), telling loading how long it has said so. A replica is offered
// once the fleet finds it ready, but a pod's readiness and the engine's
// own can part for a moment, and a big model can take a while more. Any
// other answer, even a refusal, is the smoke test's result.
func (s *Server) ask(ctx context.Context, route string, body []byte, loading func(time.Duration)) ([]byte, error) {
	first := time.Now()
	var loadingSince time.Time
	for {
		b, err := s.deps.Gateway.Ask(ctx, route, body)
		switch {
		case errors.Is(err, chat.ErrLoading):
			if loadingSince.IsZero() {
				loadingSince = time.Now()
			}
			loading(time.Since(loadingSince))
		case ctx.Err() != nil && !loadingSince.IsZero():
			return nil, sentencef("the engine was still loading the model after %s, the smoke test's limit: "+
				"the replica's log says how far it came", s.deps.SmokeTimeout)
		case !errors.Is(err, chat.ErrNoAnswer) || time.Since(first) >= smokeReach:
			return b, err
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// smokeEmbeddings asks an embedding model for one vector and says its
// length: an embedding model does not chat.
func (s *Server) smokeEmbeddings(ctx context.Context, name string, loading func(time.Duration)) (string, float64, error) {
	b, err := s.ask(ctx, chat.EmbeddingsPath, chat.Embed(name, "hello").Body(), loading)
	if err != nil {
		return "", 0, err
	}
	out, ok := chat.ReadEmbeddings(b)
	if !ok {
		return "", 0, sentencef("the replica answered no vector: %s", words.Clip(strings.TrimSpace(string(b))))
	}
	return fmt.Sprintf("a vector of %d dimensions", len(out.Data[0].Embedding)), 0, nil
}
