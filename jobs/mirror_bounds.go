package jobs

import (
	"context"
	"errors"
	"slices"
	"time"

	"modelserve/internal/mirror"
	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// The mirror step is bounded twice. A registry that keeps its connections
// open and sends nothing, part after part, never fails a try for good (each
// stalled part is asked for again), and one that trickles never stalls: the
// job waited for either without end. A fetch whose files have not grown for
// Deps.MirrorNoProgress ends, and so does one still running after
// Deps.MirrorWithin. Either leaves what arrived as a partial file, never in
// place as the whole, and a retry of the job continues from it.

var (
	errNoProgress = errors.New("the mirror made no progress")
	errTooLong    = errors.New("the mirror did not finish in time")
)

// fetchBounded is the mirror's Fetch of files within the step's bounds,
// reporting its progress on the step.
func (p *pipeline) fetchBounded(ctx context.Context, files []mirror.File) ([]string, error) {
	noProgress, within := p.s.deps.MirrorNoProgress, p.s.deps.MirrorWithin
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctx, stop := context.WithTimeoutCause(ctx, within, errTooLong)
	defer stop()
	idle := time.AfterFunc(noProgress, func() { cancel(errNoProgress) })
	defer idle.Stop()

	// The progress is reported from this goroutine (Mirror.Fetch), so
	// these are read after it without a lock.
	var done, total int64 = -1, 0
	paths, err := p.s.deps.Mirror.Fetch(ctx, files, func(pr mirror.Progress) {
		p.s.progress(p.l, pr.BytesDone, pr.BytesTotal, pr.Connections)
		// Waiting its turn behind other fetches (all files queued) is not
		// a stall.
		fetching := slices.ContainsFunc(pr.Files, func(f mirror.FileProgress) bool { return f.State == mirror.Fetching })
		if pr.BytesDone > done || !fetching {
			idle.Reset(noProgress)
		}
		done, total = pr.BytesDone, pr.BytesTotal
	})
	if err == nil {
		return paths, nil
	}
	// A file by its path; a set of shards (or with its projector) by the
	// set's name.
	name, had := p.choice.Set.Name, words.SizeOf(max(done, 0), total)
	if len(files) == 1 {
		name = files[0].Path
	}
	switch context.Cause(ctx) {
	case errNoProgress:
		return nil, operr.Wrap(operr.Unavailable, err, "the mirror made no progress on %s for %s, with %s arrived: the registry stopped sending it; "+
			"retry the job to continue from there, once the registry answers again", name, words.Span(noProgress), had)
	case errTooLong:
		return nil, operr.Wrap(operr.Unavailable, err, "the mirror had not fetched %s after %s, with %s arrived: "+
			"retry the job to continue from there, or raise --download-rate if it holds fetches back", name, words.Span(within), had)
	}
	return nil, err
}
