package handlers

import (
	"fmt"
	"time"
)

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

// rateText is bytes a second in the unit a download is read in, decimal
// as words.Size says the sizes beside it.
func rateText(bps float64) string {
	switch {
	case bps >= 1e9:
		return fmt.Sprintf("%.2f GB/s", bps/1e9)
	case bps >= 1e6:
		return fmt.Sprintf("%.1f MB/s", bps/1e6)
	}
	return fmt.Sprintf("%.0f KB/s", bps/1e3)
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

func formatFloat(f float64) string { return fmt.Sprintf("%.1f", f) }
