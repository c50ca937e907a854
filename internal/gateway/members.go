package gateway

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// members are the members of the JSON object body, by name, each value
// as it is in body (a slice of it, not a copy), the last of a name
// winning as with encoding/json; not ok when body is not one JSON object.
// Decoding the body into a map of raw messages copied every value and
// took two dozen allocations, a tenth of all a request made.
//
// The body is checked and its members found in one pass, with the JSON
// grammar encoding/json's Valid holds it to: Valid before a second pass
// took three times as long as the pass, 80 µs for a prompt of 16 KiB,
// more than all else the gateway does with a request.
func members(body []byte) (map[string]json.RawMessage, bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	fields := make(map[string]json.RawMessage, 8)
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return fields, skipSpace(body, i+1) == len(body)
	}
	for {
		end := scanString(body, i)
		if end < 0 {
			return nil, false
		}
		name, ok := jsonString(body[i:end])
		if !ok {
			return nil, false
		}
		if i = skipSpace(body, end); i >= len(body) || body[i] != ':' {
			return nil, false
		}
		i = skipSpace(body, i+1)
		if end = scanValue(body, i, 1); end < 0 {
			return nil, false
		}
		fields[name] = body[i:end:end]
		if i = skipSpace(body, end); i >= len(body) {
			return nil, false
		}
		switch body[i] {
		case '}':
			return fields, skipSpace(body, i+1) == len(body)
		case ',':
			i = skipSpace(body, i+1)
		default:
			return nil, false
		}
	}
}

// maxDepth is how deeply arrays and objects may nest in a body, as
// encoding/json bounds them.
const maxDepth = 10000

// scanValue is the index just past the JSON value that begins at b[i], -1
// when none does; depth is how many arrays and objects hold it.
func scanValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; {
	case c == '"':
		return scanString(b, i)
	case c == '{' || c == '[':
		return scanContainer(b, i, depth+1)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	}
	return -1
}

// scanContainer is scanValue for the object or array at b[i].
func scanContainer(b []byte, i, depth int) int {
	if depth > maxDepth {
		return -1
	}
	object := b[i] == '{'
	closing := byte(']')
	if object {
		closing = '}'
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == closing {
		return i + 1
	}
	for {
		if object {
			end := scanString(b, i)
			if end < 0 {
				return -1
			}
			if i = skipSpace(b, end); i >= len(b) || b[i] != ':' {
				return -1
			}
			i = skipSpace(b, i+1)
		}
		end := scanValue(b, i, depth)
		if end < 0 {
			return -1
		}
		if i = skipSpace(b, end); i >= len(b) {
			return -1
		}
		switch b[i] {
		case closing:
			return i + 1
		case ',':
			i = skipSpace(b, i+1)
		default:
			return -1
		}
	}
}

// scanString is the index just past the JSON string at b[i], -1 when
// there is none: unclosed, a control character in it, or an escape JSON
// has not. The closing quote and escapes are found with IndexByte, which
// reads many bytes at a time: a prompt is mostly one long string.
func scanString(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	for j := i + 1; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		seg := b[j : j+k]
		e := bytes.IndexByte(seg, '\\')
		if e < 0 {
			if hasControl(seg) {
				return -1
			}
			return j + k + 1
		}
		if hasControl(seg[:e]) {
			return -1
		}
		j += e // at the backslash
		if j+1 >= len(b) {
			return -1
		}
		switch b[j+1] {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			j += 2
		case 'u':
			if j+5 >= len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
				return -1
			}
			j += 6
		default:
			return -1
		}
	}
}

// hasControl is whether s holds a control character, which a JSON string
// may hold only escaped.
func hasControl(s []byte) bool {
	for _, c := range s {
		if c < 0x20 {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// scanNumber is the index just past the JSON number at b[i], -1 when
// there is none.
func scanNumber(b []byte, i int) int {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && b[j] >= '1' && b[j] <= '9':
		j = digits(b, j)
	default:
		return -1
	}
	if j < len(b) && b[j] == '.' {
		if k := digits(b, j+1); k > j+1 {
			j = k
		} else {
			return -1
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := digits(b, j)
		if k == j {
			return -1
		}
		j = k
	}
	return j
}

// digits is the index of the first byte from i on that is not a digit.
func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

// literal is the index just past word at b[i], -1 when it is not there.
func literal(b []byte, i int, word string) int {
	if len(b)-i < len(word) || string(b[i:i+len(word)]) != word {
		return -1
	}
	return i + len(word)
}

// jsonString is the JSON value raw decoded as a string; not ok when it is
// not one. A string with no escape (a model's name, a member's) is cut
// out of raw; only one with escapes is decoded, the variable it is
// decoded into made only then: made for each member, it was an
// allocation for each. Invalid UTF-8 is decoded too, as encoding/json
// decodes it, to U+FFFD.
func jsonString(raw []byte) (string, bool) {
	if len(raw) >= 2 && raw[0] == '"' && raw[len(raw)-1] == '"' && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false
	}
	return s, true
}

// skipSpace is the index of the first byte from i on that is not JSON
// white space.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}
