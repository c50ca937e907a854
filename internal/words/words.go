// Package words writes numbers the way modelserve's pages and sentences
// say them: byte sizes, counts of things, percentages and spans of time;
// and how much of someone's input they quote back.
//
// Each of these was once written in five or six places that drifted
// apart: one page said "9 GB" where the job's sentence beside it said
// "9.0 GB", and a small model was "0.0 GB"; six clippers cut input at 20,
// 100 or 300 characters, or not at all, and a megabyte typed into a field
// came back whole in the page, the error and the log line. Everything
// that puts a size, a plural, a percentage or a piece of input in front
// of an operator asks this package.
package words

import (
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ClipMost is the most of one piece of input, in bytes, that an answer,
// a page, a header, an error or a log line quotes back: enough to
// recognise what was sent, never a megabyte of it.
const ClipMost = 200

// Clip is s as an answer, a page, a header, an error or a log line may
// quote it: s itself when it is at most ClipMost bytes, else its first
// ClipMost bytes, cut on a rune boundary, and how much was cut:
// "xxxx… (1 MB cut)".
func Clip(s string) string {
	head, cut := Cut(s)
	return head + cut
}

// Cut is Clip in its two parts, for a caller that quotes the head: head
// is s, or as much of it as is kept; cut is "", or what says that the
// rest was cut and how much of it there was ("… (1 MB cut)").
func Cut(s string) (head, cut string) {
	if len(s) <= ClipMost {
		return s, ""
	}
	n := ClipMost
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], "… (" + Size(int64(len(s)-n)) + " cut)"
}

// units are decimal, as the Hub shows a file's size and as the flags
// read "350MB" (350,000,000 bytes): a size typed in one place is the same
// figure when a page says it back.
var units = []struct {
	name string
	size float64
}{{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}}

// Size is a byte count in the largest unit it is at least one of, to a
// tenth, without a tenth that is nothing: "9 GB", "4.4 GB", "310.5 MB",
// "12 KB", "900 bytes". A tenth stays: "15.9 GB of 16 GB" says there is
// room to spare.
func Size(b int64) string {
	name, div := unitOf(b)
	if div == 1 {
		return strconv.FormatInt(b, 10) + " bytes"
	}
	return tenth(float64(b)/div) + " " + name
}

// SizeOf is how far something of total bytes is, in the total's unit:
// "3.1 of 4.9 GB", "0 of 310 MB".
func SizeOf(done, total int64) string {
	name, div := unitOf(total)
	if div == 1 {
		return strconv.FormatInt(done, 10) + " of " + strconv.FormatInt(total, 10) + " bytes"
	}
	return tenth(float64(done)/div) + " of " + tenth(float64(total)/div) + " " + name
}

// GB is a size given in binary gigabytes (GiB), as the plan's figures and
// a nodes file count memory, said in the same (decimal) units as Size:
// 24 GiB is "25.8 GB", 0.5 GiB "536.9 MB".
func GB(gib float64) string { return Size(int64(math.Round(gib * (1 << 30)))) }

// unitOf is the largest unit b is at least one of once written to a
// tenth (999.96 MB is "1 GB", not "1000 MB"), and its size; 1 for
// bytes, which are counted exactly below a kilobyte.
func unitOf(b int64) (string, float64) {
	for _, u := range units {
		if math.Round(float64(b)/u.size*10) >= 10 && b >= 1000 {
			return u.name, u.size
		}
	}
	return "bytes", 1
}

// tenth is v to a tenth, "9" rather than "9.0".
func tenth(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// Plural is one for a count of 1 and many for any other: "1 file",
// "0 files", "3 files".
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// Count is n and the word for that many: "1 file", "3 files".
func Count(n int, one, many string) string {
	return strconv.Itoa(n) + " " + Plural(n, one, many)
}

// Percent is a share (1 is the whole) as a percentage: whole percents
// from 10% ("63%"), a tenth below it, where a tenth is news ("2.5%",
// "0.4%"). A share that is not nothing is never "0%" ("<0.1%"), and one
// short of the whole is never "100%" ("99%"): a download at 99.7% has
// not arrived, and a canary that failed one request in ten thousand did
// fail one.
func Percent(share float64) string {
	p := share * 100
	switch {
	case math.IsNaN(p) || math.IsInf(p, 0):
		return "—"
	case p < 0:
		return "-" + Percent(-share)
	case p == 0:
		return "0%"
	case p < 0.05:
		return "<0.1%"
	case p < 9.95:
		return tenth(p) + "%"
	}
	r := math.Round(p)
	if r == 100 && p < 100 {
		r = 99
	}
	return strconv.FormatFloat(r, 'f', 0, 64) + "%"
}

// Span is a duration to the second as people write it and as Go's
// time.ParseDuration reads it back: "30m", "1h30m", "45s" (not "30m0s").
func Span(d time.Duration) string {
	s := d.Round(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
