package main

import "testing"

func TestDownloadRateReadsAsBytesASecond(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{{"", 0, true}, {"50MB", 50e6, true}, {"1.5GB", 15e8, true}, {"800 KiB", 800 << 10, true},
		{"fast", 0, false}, {"-5MB", 0, false}, {"10", 0, false}, {"5PB", 0, false}} {
		got, err := parseRate(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("parseRate(%q) = %d, %v; want %d (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}
