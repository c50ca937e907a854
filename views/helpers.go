package views

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/a-h/templ"
)

// csrfHeaders is the hx-headers value that makes htmx send the session's
// token with every request it makes.
func csrfHeaders(token string) string {
	b, _ := json.Marshal(map[string]string{"X-CSRF-Token": token})
	return string(b)
}

// jsonVals is an hx-vals value.
func jsonVals(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// stateIcon is the icon beside a state's word; the word says it, the icon
// lets the eye find it.
func stateIcon(key string) string {
	switch key {
	case "done", "fits-now", "ready", "promoted":
		return "✓"
	case "failed", "does-not-fit", "parked", "no-node-fits":
		return "✗"
	case "running":
		return "▶"
	case "skipped":
		return "↷"
	case "rolled-back":
		return "↺"
	case "cancelled", "stopping", "stopped":
		return "■"
	case "fits-when-free", "partial", "queued", "starting", "loading", "waiting-for-room":
		return "◐"
	case "fetching":
		return "↓"
	case "present":
		return "✓"
	}
	return "○"
}

// StateOf is a state for a word.
func StateOf(word string) State {
	return State{Word: word, Key: strings.ReplaceAll(word, " ", "-")}
}

// width is a bar part's width; share is a percentage worked out by the
// handler, so the CSS is made of a number alone.
func width(share float64) templ.SafeCSS {
	return templ.SafeCSS(fmt.Sprintf("width:%.2f%%", clamp(share)))
}

func left(share float64) templ.SafeCSS {
	return templ.SafeCSS(fmt.Sprintf("left:%.2f%%", clamp(share)))
}

func clamp(v float64) float64 {
	return min(max(v, 0), 100)
}

func itoa(n int) string { return fmt.Sprint(n) }

// joinLines is a log's lines as one text, for a <pre>.
func joinLines(lines []string) string { return strings.Join(lines, "\n") }

func i64(n int64) string { return fmt.Sprint(n) }

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// nameParts cuts a file name after each of its separators (- _ . /), the
// places it may break across lines: "Qwen2.5-7B-Q4_K_M.gguf" breaks
// between its words, never inside "Qwen2" as a break anywhere did.
func nameParts(name string) []string {
	var out []string
	start := 0
	for i, c := range name {
		if strings.ContainsRune("-_./", c) {
			out = append(out, name[start:i+1])
			start = i + 1
		}
	}
	if start < len(name) {
		out = append(out, name[start:])
	}
	return out
}
