package views

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/PuerkitoBio/goquery"
)

var start = time.Date(2026, 3, 4, 10, 0, 0, 0, time.UTC)

// hourChart is a chart of the hour from start, one point a minute at the
// given minutes.
func hourChart(values map[int]float64, minutes ...int) Chart {
	c := Chart{ID: "c", Start: start, End: start.Add(time.Hour), Step: time.Minute, Lines: []ChartLine{{Class: "requests"}}}
	for _, m := range minutes {
		c.Lines[0].Points = append(c.Lines[0].Points, ChartPoint{At: start.Add(time.Duration(m) * time.Minute), Value: values[m]})
	}
	return c
}

func TestPlotChart(t *testing.T) {
	// The drawing is 120 wide and 36 high with 2 of margin: an hour runs
	// from x 2 to 118 (116 units, 1.9333 a minute), values from y 34 (0)
	// up to y 2 (the highest).
	for _, tc := range []struct {
		name   string
		chart  Chart
		pieces []string
	}{
		{"a known series", hourChart(map[int]float64{0: 0, 1: 4, 2: 8, 30: 2}, 0, 1, 2, 30),
			[]string{"2,34 3.9,18 5.9,2", "60,26"}},
		{"a single point", hourChart(map[int]float64{60: 3}, 60), []string{"118,2"}},
		{"zeros lie along the base", hourChart(map[int]float64{}, 10, 11), []string{"21.3,34 23.3,34"}},
		{"a point before the window is held to its edge", hourChart(map[int]float64{-5: 1}, -5), []string{"2,2"}},
		{"no points", hourChart(nil), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := plotChart(tc.chart)
			if p.Baseline != 34 {
				t.Errorf("baseline at y %v, want 34", p.Baseline)
			}
			if got := p.Lines[0].Pieces; !reflect.DeepEqual(got, tc.pieces) {
				t.Errorf("pieces = %q, want %q", got, tc.pieces)
			}
			if got, want := len(p.Lines[0].Dots), len(tc.chart.Lines[0].Points); got != want {
				t.Errorf("%d dots, want one on each of the %d points", got, want)
			}
		})
	}
}

func TestPlotChartShareOneScale(t *testing.T) {
	c := hourChart(nil)
	c.Lines = []ChartLine{
		{Class: "free", Points: []ChartPoint{{At: start, Value: 100}}},
		{Class: "promised", Points: []ChartPoint{{At: start, Value: 50}}},
	}
	p := plotChart(c)
	if free, promised := p.Lines[0].Dots[0].Y, p.Lines[1].Dots[0].Y; free != 2 || promised != 18 {
		t.Errorf("free at y %v and promised at y %v, want 2 and 18: half the highest is half the height", free, promised)
	}
}

func TestChartViewDrawsItsPoints(t *testing.T) {
	c := hourChart(map[int]float64{58: 2, 59: 5}, 58, 59)
	c.Title, c.Desc, c.Caption, c.Peak = "requests a minute of alpha", "latest 5 requests/min", "5 requests/min", "max 5"
	c.Lines[0].Points[1].Label = "10:59 UTC: 5 requests"
	var b strings.Builder
	if err := ChartView(c).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	doc, err := goquery.NewDocumentFromReader(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	var values []string
	doc.Find("circle").Each(func(_ int, s *goquery.Selection) { values = append(values, s.AttrOr("data-value", "")) })
	if !reflect.DeepEqual(values, []string{"2", "5"}) {
		t.Errorf("dots carry %q, want the values 2 and 5", values)
	}
	if got := doc.Find("circle").Last().AttrOr("cy", ""); got != "2" {
		t.Errorf("the highest point is drawn at y %s, want 2, the top", got)
	}
	if got := doc.Find("svg title").First().Text(); got != c.Title {
		t.Errorf("title %q, want %q", got, c.Title)
	}
	if got := doc.Find("svg").AttrOr("aria-labelledby", ""); got != "c-title c-desc" {
		t.Errorf("aria-labelledby %q, want the title and the description", got)
	}
	if got := doc.Find(`[data-testid="chart-latest"]`).Text(); got != "5 requests/min" {
		t.Errorf("caption %q, want the latest value with its unit", got)
	}
	if got := doc.Find("circle title").Last().Text(); got != "10:59 UTC: 5 requests" {
		t.Errorf("the last dot says %q, want its value in words", got)
	}
}

func TestModelChartsViewSaysWhenThereIsNothing(t *testing.T) {
	var b strings.Builder
	if err := ModelChartsView(ModelCharts{Empty: "no requests in the last hour"}).Render(context.Background(), &b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "no requests in the last hour") || strings.Contains(b.String(), "<svg") {
		t.Errorf("an empty hour renders %q, want the sentence and no picture", b.String())
	}
}
