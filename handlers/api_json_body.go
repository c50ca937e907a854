package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"modelserve/internal/operr"
	"modelserve/internal/words"
)

// A request's JSON body is refused with a sentence that says what to mend,
// and quotes no more of what was sent than words.Clip keeps: the
// decoder's own messages carry the whole of a field's name or a number's
// text, which may be a megabyte long.

// bodyProblem says what is wrong with a body the decoder refused.
func bodyProblem(err error) string {
	var te *json.UnmarshalTypeError
	var big *http.MaxBytesError
	switch {
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return "it should be " + jsonKind(te.Type)
		}
		return fmt.Sprintf("%s should be %s", operr.Quote(field), jsonKind(te.Type))
	case errors.Is(err, io.EOF):
		return "it is empty; send one JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "it ends in the middle of a value"
	case errors.As(err, &big):
		return "it is larger than 1 MiB"
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if f, ok := strings.CutPrefix(msg, "unknown field "); ok {
		name, uerr := strconv.Unquote(f)
		if uerr != nil {
			name = f
		}
		return "it has an unknown field " + operr.Quote(name) + ": check its spelling against the README"
	}
	// A syntax error names a character and an offset; anything else is
	// cut, should it quote more than that.
	return words.Clip(msg)
}

// jsonKind names the JSON a Go type is read from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "a list"
	default:
		return "an object"
	}
}

// oneValue refuses a body with anything but space after its first value.
// Two objects in one body would otherwise be read as the first alone, and
// serve what the caller did not mean (or meant only half of).
func oneValue(dec *json.Decoder) error {
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("the request body holds more than one JSON value: send one object per request")
	}
	return nil
}
