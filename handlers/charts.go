package handlers

import (
	"fmt"
	"slices"
	"time"

	"modelserve/internal/rollup"
	"modelserve/internal/words"
	"modelserve/views"
)

// Rollups are the last hour of each model's requests and each node's
// memory, a minute at a time (rollup.Recorder).
type Rollups interface {
	Hour() rollup.Hour
}

// hour is the last hour of the figures, and whether there are any to
// draw (no Rollups, none).
func (s *Server) hour() (rollup.Hour, bool) {
	if s.deps.Rollups == nil {
		return rollup.Hour{}, false
	}
	return s.deps.Rollups.Hour(), true
}

// modelCharts are a model's pictures of the hour: its requests a minute,
// p50 latency and tokens/s; a sentence instead when it had no requests.
func modelCharts(name string, h rollup.Hour) views.ModelCharts {
	minutes := h.Models[name]
	if !slices.ContainsFunc(minutes, func(m rollup.ModelMinute) bool { return m.Requests > 0 }) {
		return views.ModelCharts{Empty: "no requests in the last hour"}
	}
	requests := hourChart(h, "requests-"+name, "requests a minute of "+name, "requests")
	latency := hourChart(h, "latency-"+name, "median latency of "+name+"'s answers", "latency")
	speed := hourChart(h, "speed-"+name, "tokens a second of "+name+"'s answers", "speed")
	for _, m := range minutes {
		requests.Lines[0].Points = append(requests.Lines[0].Points, views.ChartPoint{At: m.Minute, Value: float64(m.Requests),
			Label: minuteLabel(m.Minute, m.Partial) + words.Count(m.Requests, "request", "requests")})
		// A minute with no answer has no latency and no speed: a gap,
		// not a zero.
		if m.P50Ms > 0 {
			latency.Lines[0].Points = append(latency.Lines[0].Points, views.ChartPoint{At: m.Minute, Value: m.P50Ms,
				Label: minuteLabel(m.Minute, m.Partial) + "p50 " + latencyMs(m.P50Ms)})
		}
		if m.TokensPerSecond > 0 {
			speed.Lines[0].Points = append(speed.Lines[0].Points, views.ChartPoint{At: m.Minute, Value: m.TokensPerSecond,
				Label: minuteLabel(m.Minute, m.Partial) + speedText(m.TokensPerSecond)})
		}
	}
	caption(&requests, "", func(v float64) string { return words.Count(int(v), "request/min", "requests/min") }, "no requests")
	caption(&latency, "p50 ", latencyMs, "no answers")
	caption(&speed, "", speedText, "no tokens counted")
	return views.ModelCharts{Charts: []views.Chart{requests, latency, speed}}
}

// nodeChart is a node's memory over the hour: promised to its replicas,
// measured of their engines, and free for another; nothing when the hour
// has none of it.
func nodeChart(name string, h rollup.Hour) views.Chart {
	minutes := h.Nodes[name]
	if len(minutes) == 0 {
		return views.Chart{}
	}
	c := hourChart(h, "memory-"+name, "memory of node "+name, "promised")
	c.Lines = []views.ChartLine{{Name: "promised", Class: "promised"}, {Name: "measured", Class: "measured"}, {Name: "free", Class: "free"}}
	for _, m := range minutes {
		for i, v := range []int64{m.PromisedBytes, m.MeasuredBytes, m.FreeBytes} {
			c.Lines[i].Points = append(c.Lines[i].Points, views.ChartPoint{At: m.Minute, Value: float64(v),
				Label: minuteLabel(m.Minute, m.Partial) + words.Size(v) + " " + c.Lines[i].Name})
		}
	}
	last := minutes[len(minutes)-1]
	c.Caption = fmt.Sprintf("%s promised, %s measured, %s free", words.Size(last.PromisedBytes), words.Size(last.MeasuredBytes), words.Size(last.FreeBytes))
	c.Peak = "max " + words.Size(int64(peak(c)))
	c.Desc = c.Title + " " + windowText(c) + ": now " + c.Caption + "."
	return c
}

// hourChart is an empty chart of one figure over h's window.
func hourChart(h rollup.Hour, id, title, class string) views.Chart {
	return views.Chart{ID: "chart-" + id, Title: title, Start: h.Start, End: h.End, Step: time.Minute,
		Lines: []views.ChartLine{{Class: class}}}
}

// caption says a one-figure chart's latest value, after what, and its
// highest, each by say; none when it drew nothing.
func caption(c *views.Chart, what string, say func(float64) string, none string) {
	pts := c.Lines[0].Points
	if len(pts) == 0 {
		c.Caption = none
		c.Desc = c.Title + " " + windowText(*c) + ": " + none + "."
		return
	}
	c.Caption = what + say(pts[len(pts)-1].Value)
	c.Peak = "max " + say(peak(*c))
	c.Desc = c.Title + " " + windowText(*c) + ": latest " + c.Caption + ", " + c.Peak + "."
}

// peak is the highest value c draws.
func peak(c views.Chart) float64 {
	high := 0.0
	for _, l := range c.Lines {
		for _, p := range l.Points {
			high = max(high, p.Value)
		}
	}
	return high
}

// windowText is a chart's window in words: "from 10:00 to 11:00 UTC".
func windowText(c views.Chart) string {
	return "from " + c.Start.UTC().Format("15:04") + " to " + c.End.UTC().Format("15:04") + " UTC"
}

// minuteLabel begins a point's words: "10:04 UTC: ", and for the minute
// in progress "10:04 UTC, so far: ".
func minuteLabel(at time.Time, partial bool) string {
	if partial {
		return at.UTC().Format("15:04") + " UTC, so far: "
	}
	return at.UTC().Format("15:04") + " UTC: "
}

// latencyMs is a latency in milliseconds in words, as the pages say
// latencies.
func latencyMs(ms float64) string { return latencyText(time.Duration(ms * float64(time.Millisecond))) }
