package jobs

import (
	"strconv"
	"strings"
)

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
