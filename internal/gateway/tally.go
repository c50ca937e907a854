package gateway

import (
	"bytes"
	"encoding/json"
	"strconv"
	"time"
)

// tally reads an answer's token counts as it is relayed, without holding
// the answer: llama.cpp puts them in the body of a plain answer (usage,
// timings) and in the last events of a stream, vLLM in usage alone.
type tally struct {
	stream bool
	// A stream's line being read, and the counts of the last data line
	// that carried them: read as the line goes by rather than kept, as
	// a line may be the relay's read buffer.
	line []byte
	last counts
	// skip is a line too long to be one of the counts' events.
	skip bool
	// done is whether the stream's closing "data: [DONE]" went by: the
	// client has the whole answer, whatever happens after.
	done bool
	// A plain answer's body, up to maxTallied.
	body []byte
	over bool
	// keepText keeps a stream's text as it goes by, up to
	// maxTracedContent, for --trace-content.
	keepText bool
	text     []byte
}

// maxTallied bounds what is kept of an answer to read its counts: a chat
// answer is kilobytes; an answer larger than this (many embeddings) goes
// uncounted rather than held twice in memory.
const (
	maxTallied  = 4 << 20
	maxLineKept = 1 << 20
)

func (t *tally) feed(b []byte) {
	if !t.stream {
		if t.over || len(t.body)+len(b) > maxTallied {
			t.over, t.body = true, nil
			return
		}
		t.body = append(t.body, b...)
		return
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			if !t.skip && len(t.line)+len(b) <= maxLineKept {
				t.line = append(t.line, b...)
			} else {
				t.skip, t.line = true, t.line[:0]
			}
			return
		}
		switch {
		case t.skip:
		case len(t.line) == 0:
			// A line whole in this read, as most of a stream's are, is
			// read where it is: copying each event first was most of
			// what a stream's counting allocated.
			if i <= maxLineKept {
				t.endLine(b[:i])
			}
		case len(t.line)+i <= maxLineKept:
			t.line = append(t.line, b[:i]...)
			t.endLine(t.line)
		}
		t.line, t.skip = t.line[:0], false
		b = b[i+1:]
	}
}

// endLine reads one line of a stream, without its newline. It does not
// keep line, which may be the relay's read buffer.
func (t *tally) endLine(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if ok && string(bytes.TrimSpace(data)) == "[DONE]" {
		t.done = true
		return
	}
	if ok && t.keepText && len(t.text) < maxTracedContent {
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal(data, &chunk) == nil {
			for _, c := range chunk.Choices {
				t.text = append(t.text, c.Delta.Content+c.Text...)
			}
		}
	}
	if !ok || !(bytes.Contains(data, []byte(`"usage"`)) || bytes.Contains(data, []byte(`"timings"`))) {
		return
	}
	t.last = countsOf(data)
}

// counts are the answer's tokens, as far as the engine said, and how long
// it took to generate them (timings.predicted_ms; 0 when not said).
type counts struct {
	prompt, cached, completion int
	generating                 time.Duration
}

func (t *tally) counts() counts {
	if t.stream {
		return t.last
	}
	return countsOf(t.body)
}

// countsOf reads the counts of an answer's body, or of a stream's event.
func countsOf(src []byte) counts {
	var c counts
	if timings := objectOf(src, `"timings"`); timings != nil {
		// prompt_n is what the engine evaluated; cache_n what it took
		// from its prompt cache instead.
		cached := int(numberOf(timings, `"cache_n"`))
		c = counts{prompt: int(numberOf(timings, `"prompt_n"`)) + cached, cached: cached, completion: int(numberOf(timings, `"predicted_n"`)),
			generating: time.Duration(numberOf(timings, `"predicted_ms"`) * float64(time.Millisecond))}
	}
	if usage := objectOf(src, `"usage"`); usage != nil {
		c.prompt, c.completion = int(numberOf(usage, `"prompt_tokens"`)), int(numberOf(usage, `"completion_tokens"`))
		// vLLM has no timings: what its prefix cache held of the prompt
		// is usage's prompt_tokens_details.cached_tokens (null when none).
		if details := objectOf(usage, `"prompt_tokens_details"`); details != nil && objectOf(src, `"timings"`) == nil {
			c.cached = int(numberOf(details, `"cached_tokens"`))
		}
	}
	return c
}

// numberOf is the number that is the value of the first member named key
// (quoted) in the JSON object obj, 0 when there is none. The counts are
// read this way rather than decoded: decoding them took eighteen
// allocations a request.
func numberOf(obj []byte, key string) float64 {
	for rest := obj; ; {
		i := bytes.Index(rest, []byte(key))
		if i < 0 {
			return 0
		}
		rest = rest[i+len(key):]
		v, ok := bytes.CutPrefix(bytes.TrimLeft(rest, " \t\r\n"), []byte(":"))
		if !ok {
			continue
		}
		v = bytes.TrimLeft(v, " \t\r\n")
		end := 0
		for end < len(v) && (v[end] >= '0' && v[end] <= '9' || v[end] == '-' || v[end] == '+' || v[end] == '.' || v[end] == 'e' || v[end] == 'E') {
			end++
		}
		n, err := strconv.ParseFloat(string(v[:end]), 64)
		if err != nil {
			return 0
		}
		return n
	}
}

// objectOf is the object that is the value of the last member named key
// (quoted) in the JSON src, nil when there is none. Only the object is
// decoded, not the whole answer around it: decoding a whole answer, its
// text included, was a fifth of what relaying it cost. A quote inside a
// JSON string is escaped, so key followed by a colon is a member's name,
// never text of the answer; the engine puts usage and timings at the top
// level, after the choices.
func objectOf(src []byte, key string) []byte {
	i := bytes.LastIndex(src, []byte(key))
	for i >= 0 {
		rest := bytes.TrimLeft(src[i+len(key):], " \t\r\n")
		if v, ok := bytes.CutPrefix(rest, []byte(":")); ok {
			v = bytes.TrimLeft(v, " \t\r\n")
			if end := objectEnd(v); end > 0 {
				return v[:end]
			}
			return nil
		}
		i = bytes.LastIndex(src[:i], []byte(key))
	}
	return nil
}

// objectEnd is the length of the object v begins with (braces counted
// outside strings), 0 when v does not begin with a whole one.
func objectEnd(v []byte) int {
	if len(v) == 0 || v[0] != '{' {
		return 0
	}
	depth, inString := 0, false
	for i := 0; i < len(v); i++ {
		switch b := v[i]; {
		case inString && b == '\\':
			i++
		case b == '"':
			inString = !inString
		case inString:
		case b == '{':
			depth++
		case b == '}':
			if depth--; depth == 0 {
				return i + 1
			}
		}
	}
	return 0
}

// answerText is the answer's text, its choices' one after the other, as
// far as kept (a stream's when keepText), cut to maxTracedContent; "" for
// an answer with none (embeddings, an error).
func (t *tally) answerText() string {
	text := t.text
	if !t.stream {
		var v struct {
			Choices []struct {
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
				Text string `json:"text"`
			} `json:"choices"`
		}
		if json.Unmarshal(t.body, &v) != nil {
			return ""
		}
		for _, c := range v.Choices {
			text = append(text, c.Message.Content+c.Text...)
		}
	}
	return string(text[:min(len(text), maxTracedContent)])
}
