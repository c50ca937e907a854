package handlers

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a-h/templ"
)

// text is a component that writes s.
func text(s string) templ.Component {
	return templ.ComponentFunc(func(_ context.Context, w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	})
}

func TestPollSectionsSendsWhatChanged(t *testing.T) {
	for _, tc := range []struct {
		name  string
		looks [][]part
		want  []string
	}{
		{"the first look sends every part",
			[][]part{{{"a", text("1")}, {"b", text("x")}}},
			[]string{"a: 1", "b: x"}},
		{"a part that did not change is not sent again",
			[][]part{{{"a", text("1")}, {"b", text("x")}}, {{"a", text("1")}, {"b", text("y")}}, {{"a", text("2")}, {"b", text("y")}}},
			[]string{"a: 1", "b: x", "b: y", "a: 2"}},
		{"a quiet page sends nothing after its first look",
			[][]part{{{"a", text("1")}}, {{"a", text("1")}}, {{"a", text("1")}}},
			[]string{"a: 1"}},
		{"an empty part is not sent: empty data would close the stream",
			[][]part{{{"a", text("")}, {"b", text("x")}}, {{"a", text("1")}, {"b", text("x")}}},
			[]string{"b: x", "a: 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &Server{events: newEvents(nil)}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := 0
				s.pollSections(w, r, time.Millisecond, func(context.Context, time.Time) ([]part, bool) {
					if n == len(tc.looks) {
						return nil, false // the stream ends, as on a failed look
					}
					n++
					return tc.looks[n-1], true
				})
			}))
			defer srv.Close()
			resp, err := http.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			// Each event is a block of lines; its fields come in any order.
			var got []string
			var event, data string
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line := sc.Text()
				switch {
				case line == "" && event != "":
					got = append(got, event+": "+data)
					event, data = "", ""
				case strings.HasPrefix(line, "event:"):
					event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
				case strings.HasPrefix(line, "data:"):
					data = strings.TrimSpace(strings.TrimPrefix(line, "data:"))
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %q, want %q", got, tc.want)
			}
		})
	}
}
