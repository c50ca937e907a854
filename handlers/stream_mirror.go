package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"modelserve/internal/mirror"
	"modelserve/views"
)

// mirrorEvery is how often the mirror page's stream looks at the files in
// flight: often enough for a rate that moves, and each look is the
// mirror's memory alone.
const mirrorEvery = time.Second

// mirrorStream sends the mirror page's list as files arrive: first as it
// stands, then whenever its rendering changes. Each look reads the
// downloads' progress from the mirror's memory (Flights); the folder is
// walked again (List), and the waiting jobs read, only when a download
// starts or ends.
func (s *Server) mirrorStream(w http.ResponseWriter, r *http.Request, v visit) {
	var (
		keys    = "\x00" // never a real set of keys: the first look lists
		entries []mirror.Entry
		waiting map[string][]string
		held    map[[2]string]string
		meters  = map[string]*rateMeter{}
	)
	s.pollSections(w, r, mirrorEvery, func(ctx context.Context, _ time.Time) ([]part, bool) {
		flights := s.deps.Mirror.Flights()
		if k := flightKeys(flights); k != keys {
			list, err := s.deps.Mirror.List(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.deps.Log.Error("listing the mirror for its page", "err", err)
				}
				return nil, false // the browser reconnects and tries again
			}
			entries, waiting, held, keys = list, s.waitingJobs(ctx, list), s.versionsHolding(ctx, list), k
		} else {
			byKey := make(map[string]mirror.Entry, len(flights))
			for _, f := range flights {
				byKey[mirrorKey(f.Entry)] = f.Entry
			}
			for i, e := range entries {
				if f, ok := byKey[mirrorKey(e)]; ok {
					entries[i] = f
				}
			}
		}
		return []part{{"files", views.MirrorLiveView(s.mirrorLive(entries, v.csrf, meters, waiting, held))}}, true
	})
}

// flightKeys names the set of files in flight and their states: when it
// changes, a download started, moved from the queue or ended.
func flightKeys(flights []mirror.Flight) string {
	var b strings.Builder
	for _, f := range flights {
		b.WriteString(mirrorKey(f.Entry))
		b.WriteByte(' ')
		b.WriteString(string(f.State))
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(f.Waiters))
		b.WriteByte('\n')
	}
	return b.String()
}
