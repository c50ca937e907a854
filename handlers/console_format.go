package handlers

import (
	"fmt"
	"math"
	"time"
)

// Sizes as the jobs write them in step details ("4.4 GB", binary units),
// so a page and a sentence beside it agree.
var sizeUnits = []struct {
	name string
	size int64
}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}}

func sizeText(b int64) string {
	for _, u := range sizeUnits {
		if b >= u.size {
			return fmt.Sprintf("%.1f %s", float64(b)/float64(u.size), u.name)
		}
	}
	return fmt.Sprintf("%d bytes", b)
}

// sizeOfText is how far a download is, in the total's unit: "3.1 of 4.9 GB".
func sizeOfText(done, total int64) string {
	for _, u := range sizeUnits {
		if total >= u.size {
			d := float64(u.size)
			return fmt.Sprintf("%.1f of %.1f %s", float64(done)/d, float64(total)/d, u.name)
		}
	}
	return fmt.Sprintf("%d of %d bytes", done, total)
}

// gbText is memory in GB, to a tenth: "15.9 GB of 16 GB" would say it
// fits with nothing to spare when it leaves a tenth.
func gbText(gb float64) string {
	if gb == float64(int64(gb)) {
		return fmt.Sprintf("%.0f GB", gb)
	}
	return fmt.Sprintf("%.1f GB", gb)
}

// durationText is a duration as a person says it: "0.4 s", "12 s",
// "3 min 20 s", "2 h 5 min".
func durationText(d time.Duration) string {
	switch {
	case d < 0:
		return "0 s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Seconds()))
	case d < time.Hour:
		m := int(d / time.Minute)
		if s := int((d % time.Minute) / time.Second); s > 0 {
			return fmt.Sprintf("%d min %d s", m, s)
		}
		return fmt.Sprintf("%d min", m)
	}
	h := int(d / time.Hour)
	if m := int((d % time.Hour) / time.Minute); m > 0 {
		return fmt.Sprintf("%d h %d min", h, m)
	}
	return fmt.Sprintf("%d h", h)
}

// rateText is bytes a second in the unit a download is read in.
func rateText(bps float64) string {
	switch {
	case bps >= 1<<30:
		return fmt.Sprintf("%.2f GB/s", bps/(1<<30))
	case bps >= 1<<20:
		return fmt.Sprintf("%.1f MB/s", bps/(1<<20))
	}
	return fmt.Sprintf("%.0f KB/s", bps/(1<<10))
}

// timeText is when something happened, in UTC (the server's clock and its
// log's), with the date only when it was not today.
func timeText(t, now time.Time) string {
	t, now = t.UTC(), now.UTC()
	if t.YearDay() == now.YearDay() && t.Year() == now.Year() {
		return t.Format("15:04:05") + " UTC"
	}
	return t.Format("2006-01-02 15:04") + " UTC"
}

func percentText(share float64) string {
	switch {
	case share > 0 && share < 1:
		return "<1%"
	}
	return fmt.Sprintf("%.0f%%", math.Round(share))
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func formatFloat(f float64) string { return fmt.Sprintf("%.1f", f) }

// itoaPlural is "1 file", "3 files".
func itoaPlural(n int, one, many string) string {
	return fmt.Sprintf("%d %s", n, plural(n, one, many))
}
