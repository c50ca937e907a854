package views

import (
	"strconv"
	"strings"
	"time"
)

// Chart is a small picture of one or more figures over a window of time
// (the last hour), drawn as SVG on the server: no chart library runs in
// the browser.
type Chart struct {
	// ID makes the chart's title and description ids unique on the page.
	ID string
	// Title and Desc are what a screen reader says of the picture;
	// Caption is the figure's latest value and unit beside it ("3
	// requests/min"), and Peak the highest value drawn ("max 5").
	Title, Desc, Caption, Peak string
	// Start and End bound the window; Step is the time between two
	// points of a line, a longer gap between them being drawn as one.
	Start, End time.Time
	Step       time.Duration
	Lines      []ChartLine
}

// ChartLine is one figure of a chart.
type ChartLine struct {
	// Name is the figure's name in the legend ("promised"); Class gives
	// it its colour.
	Name, Class string
	// Points are oldest first.
	Points []ChartPoint
}

// ChartPoint is a figure's value at a moment; Label says it in words
// ("10:04 UTC: 3 requests").
type ChartPoint struct {
	At    time.Time
	Value float64
	Label string
}

// ModelCharts are a model's pictures of the last hour (requests a minute,
// p50 latency, tokens/s), or Empty, the sentence that stands for them when
// it had no requests.
type ModelCharts struct {
	Empty  string
	Charts []Chart
}

// The size of a chart's drawing, in the SVG's own units: the picture is
// scaled to its box by CSS, and its lines keep their width.
const (
	chartWidth  = 120
	chartHeight = 36
	chartPad    = 2
)

// plot is a chart's geometry.
type plot struct {
	Width, Height int
	// Baseline is the y of the value 0.
	Baseline float64
	Lines    []plotLine
}

// plotLine is a figure's line, in pieces broken where points are
// missing, and a dot on each point.
type plotLine struct {
	Name, Class string
	Pieces      []string
	Dots        []plotDot
}

// plotDot is one point drawn.
type plotDot struct {
	X, Y  float64
	Value float64
	Label string
}

// plotChart places c's points: time from Start to End across the width,
// from 0 to the highest value up the height. A chart of zeros is drawn
// along its base; a point outside the window is held to its edge.
func plotChart(c Chart) plot {
	p := plot{Width: chartWidth, Height: chartHeight, Baseline: chartHeight - chartPad}
	high := 0.0
	for _, l := range c.Lines {
		for _, pt := range l.Points {
			high = max(high, pt.Value)
		}
	}
	span := c.End.Sub(c.Start)
	x := func(at time.Time) float64 {
		if span <= 0 {
			return chartWidth - chartPad
		}
		f := min(max(float64(at.Sub(c.Start))/float64(span), 0), 1)
		return round1(chartPad + f*(chartWidth-2*chartPad))
	}
	y := func(v float64) float64 {
		if high <= 0 {
			return p.Baseline
		}
		return round1(p.Baseline - max(v, 0)/high*(chartHeight-2*chartPad))
	}
	for _, l := range c.Lines {
		pl := plotLine{Name: l.Name, Class: l.Class}
		var piece []string
		for i, pt := range l.Points {
			if i > 0 && c.Step > 0 && pt.At.Sub(l.Points[i-1].At) > c.Step*3/2 {
				pl.Pieces = append(pl.Pieces, strings.Join(piece, " "))
				piece = nil
			}
			d := plotDot{X: x(pt.At), Y: y(pt.Value), Value: pt.Value, Label: pt.Label}
			pl.Dots = append(pl.Dots, d)
			piece = append(piece, num(d.X)+","+num(d.Y))
		}
		if len(piece) > 0 {
			pl.Pieces = append(pl.Pieces, strings.Join(piece, " "))
		}
		p.Lines = append(p.Lines, pl)
	}
	return p
}

// round1 rounds to a tenth of a unit: finer than a chart this size shows.
func round1(v float64) float64 { return float64(int64(v*10+0.5)) / 10 }

// num is a coordinate or value as an attribute says it.
func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// viewBox is a plot's viewBox attribute.
func (p plot) viewBox() string {
	return "0 0 " + strconv.Itoa(p.Width) + " " + strconv.Itoa(p.Height)
}
