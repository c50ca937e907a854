package jobs

import (
	"fmt"
	"strconv"
	"strings"
)

// units for sizes as people read them: the mirror's files are gigabytes,
// test models and companions kilobytes.
var units = []struct {
	name string
	size int64
}{{"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}}

// unitOf is the largest unit b is at least one of.
func unitOf(b int64) (string, float64) {
	for _, u := range units {
		if b >= u.size {
			return u.name, float64(u.size)
		}
	}
	return "bytes", 1
}

// size writes a byte count as "4.4 GB".
func size(b int64) string {
	name, div := unitOf(b)
	if name == "bytes" {
		return fmt.Sprintf("%d bytes", b)
	}
	return fmt.Sprintf("%.1f %s", float64(b)/div, name)
}

// sizeOf writes how far a download is in the total's unit: "3.1 of 4.9 GB".
func sizeOf(done, total int64) string {
	name, div := unitOf(total)
	if name == "bytes" {
		return fmt.Sprintf("%d of %d bytes", done, total)
	}
	return fmt.Sprintf("%.1f of %.1f %s", float64(done)/div, float64(total)/div, name)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func joinInts(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, ", ")
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
