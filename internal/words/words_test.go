package words

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestSize(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    int64
		want string
	}{
		{"nothing", 0, "0 bytes"},
		{"a few bytes", 900, "900 bytes"},
		{"just short of a kilobyte", 999, "999 bytes"},
		{"a kilobyte is a thousand bytes", 1000, "1 KB"},
		{"kilobytes to a tenth", 12_300, "12.3 KB"},
		{"a small model is megabytes, not 0.0 GB", 310e6, "310 MB"},
		{"megabytes to a tenth", 310_500_000, "310.5 MB"},
		{"the flag's 350MB reads back as 350 MB", 350e6, "350 MB"},
		{"a mebibyte is not a megabyte", 1 << 20, "1 MB"},
		{"350 MiB is more than 350 MB", 350 << 20, "367 MB"},
		{"a whole number of gigabytes has no .0", 9e9, "9 GB"},
		{"gigabytes to a tenth", 4_430_000_000, "4.4 GB"},
		{"a gibibyte is more than a gigabyte", 1 << 30, "1.1 GB"},
		{"a tenth short of a whole is said", 16e9 - 100e6, "15.9 GB"},
		{"what rounds to 1000 MB is 1 GB", 1e9 - 1e3, "1 GB"},
		{"hundreds of gigabytes", 405e9, "405 GB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Size(tc.b); got != tc.want {
				t.Errorf("Size(%d) = %q, want %q", tc.b, got, tc.want)
			}
		})
	}
}

func TestSizeOf(t *testing.T) {
	for _, tc := range []struct {
		name        string
		done, total int64
		want        string
	}{
		{"started", 0, 5e9, "0 of 5 GB"},
		{"in the total's unit", 310e6, 4_920_000_000, "0.3 of 4.9 GB"},
		{"a small file", 1e6, 12e6, "1 of 12 MB"},
		{"bytes", 10, 700, "10 of 700 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SizeOf(tc.done, tc.total); got != tc.want {
				t.Errorf("SizeOf(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
			}
		})
	}
}

func TestGB(t *testing.T) {
	for _, tc := range []struct {
		name string
		gib  float64
		want string
	}{
		{"a card of 24 GiB is 25.8 GB", 24, "25.8 GB"},
		{"to a tenth", 15.9, "17.1 GB"},
		{"under a gigabyte is megabytes", 0.5, "536.9 MB"},
		{"none", 0, "0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := GB(tc.gib); got != tc.want {
				t.Errorf("GB(%v) = %q, want %q", tc.gib, got, tc.want)
			}
		})
	}
}

func TestPluralAndCount(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n           int
		word, count string
	}{
		{"none", 0, "files", "0 files"},
		{"one", 1, "file", "1 file"},
		{"several", 3, "files", "3 files"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Plural(tc.n, "file", "files"); got != tc.word {
				t.Errorf("Plural(%d) = %q, want %q", tc.n, got, tc.word)
			}
			if got := Count(tc.n, "file", "files"); got != tc.count {
				t.Errorf("Count(%d) = %q, want %q", tc.n, got, tc.count)
			}
		})
	}
}

func TestPercent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		share float64
		want  string
	}{
		{"nothing", 0, "0%"},
		{"something is never 0%", 0.0001, "<0.1%"},
		{"a tenth below ten percent", 0.025, "2.5%"},
		{"a whole share below ten has no .0", 0.02, "2%"},
		{"whole percents from ten", 0.634, "63%"},
		{"a canary's share", 0.1, "10%"},
		{"short of the whole is never 100%", 0.997, "99%"},
		{"the whole", 1, "100%"},
		{"more than the whole", 1.3, "130%"},
		{"below nothing", -0.25, "-25%"},
		{"no share to say", math.NaN(), "—"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Percent(tc.share); got != tc.want {
				t.Errorf("Percent(%v) = %q, want %q", tc.share, got, tc.want)
			}
		})
	}
}

func TestSpan(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    time.Duration
		want string
	}{
		{"seconds", 30 * time.Second, "30s"},
		{"whole minutes without 0s", 15 * time.Minute, "15m"},
		{"whole hours without 0m", 168 * time.Hour, "168h"},
		{"hours and minutes", 90 * time.Minute, "1h30m"},
		{"minutes and seconds", 90 * time.Second, "1m30s"},
		{"to the second", 1400 * time.Millisecond, "1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Span(tc.d)
			if got != tc.want {
				t.Errorf("Span(%v) = %q, want %q", tc.d, got, tc.want)
			}
			if back, err := time.ParseDuration(got); err != nil || back != tc.d.Round(time.Second) {
				t.Errorf("Span(%v) = %q reads back as %v, %v", tc.d, got, back, err)
			}
		})
	}
}

func TestClip(t *testing.T) {
	mib := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"short input is kept whole", "acme/tiny", "acme/tiny"},
		{"input of exactly the most is kept whole", strings.Repeat("a", ClipMost), strings.Repeat("a", ClipMost)},
		{"a megabyte is cut, and says how much", mib, strings.Repeat("x", ClipMost) + "… (1 MB cut)"},
		{"a few bytes over are counted exactly", strings.Repeat("b", ClipMost+7), strings.Repeat("b", ClipMost) + "… (7 bytes cut)"},
		{"a rune is never cut in two", "a" + strings.Repeat("é", ClipMost), "a" + strings.Repeat("é", ClipMost/2-1) + "… (202 bytes cut)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Clip(tc.in)
			if got != tc.want {
				t.Errorf("Clip = %.80q… (%d bytes), want %.80q… (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
			if !utf8.ValidString(got) {
				t.Errorf("Clip cut a rune in two: %q", got)
			}
		})
	}
}
