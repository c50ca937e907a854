package gateway

import (
	"bytes"
	"strconv"
)

// renamer rewrites the model an answer names as it is relayed: a canary's
// engine answers as the canary (its --alias, the name the body was sent
// with), and the client, who asked for the model, must get the answer the
// model's own engine would have given. llama.cpp writes `"model":"<name>"`
// in a plain answer's body and in every event of a stream, with no space;
// only that member is rewritten, never a string the model generated (which
// a JSON encoder writes escaped, \"...\").
//
// Reads cut the answer anywhere, so a tail that may be the beginning of the
// member is held back until the next read says. It is at most the member's
// length, and never the end of an event (the member holds no newline), so
// no event of a stream waits for the next.
type renamer struct {
	from, to []byte
	held     []byte
	// in and out are next's buffers, kept from one read to the next: a
	// stream is renamed read by read, and a buffer made for each was
	// most of what renaming cost.
	in, out []byte
}

func newRenamer(from, to string) *renamer {
	return &renamer{from: []byte(`"model":` + strconv.Quote(from)), to: []byte(`"model":` + strconv.Quote(to))}
}

// next is what may be written of b, after what was held back before. It
// is good until the next call: the caller writes it at once.
func (r *renamer) next(b []byte) []byte {
	buf := b
	if len(r.held) > 0 {
		r.in = append(append(r.in[:0], r.held...), b...)
		buf = r.in
	}
	out, renamed := r.out[:0], false
	for {
		i := bytes.Index(buf, r.from)
		if i < 0 {
			break
		}
		out, renamed = append(append(out, buf[:i]...), r.to...), true
		buf = buf[i+len(r.from):]
	}
	k := partialSuffix(buf, r.from)
	// held is its own buffer: buf may be r.in, or b, which the caller
	// reuses.
	r.held = append(r.held[:0], buf[len(buf)-k:]...)
	if !renamed {
		return buf[:len(buf)-k]
	}
	r.out = append(out, buf[:len(buf)-k]...)
	return r.out
}

// rest is what is still held back, for the answer's end.
func (r *renamer) rest() []byte {
	held := r.held
	r.held = nil
	return held
}

// partialSuffix is the length of the longest end of b that begins p but is
// not all of it.
func partialSuffix(b, p []byte) int {
	for k := min(len(b), len(p)-1); k > 0; k-- {
		if bytes.HasSuffix(b, p[:k]) {
			return k
		}
	}
	return 0
}
