package fleet

import (
	"slices"
	"testing"
)

// Listeners are told in the order they were added; one added while they
// are told (a listener may add one) is told from the next time on.
func TestListenersAreToldInOrderAndMayAddMore(t *testing.T) {
	var l Listeners[string]
	var heard []string
	l.Tell("nobody hears this")
	l.Add(func(v string) { heard = append(heard, "first "+v) })
	l.Add(func(v string) {
		heard = append(heard, "second "+v)
		if v == "a" {
			l.Add(func(v string) { heard = append(heard, "third "+v) })
		}
	})
	l.Tell("a")
	l.Tell("b")
	want := []string{"first a", "second a", "first b", "second b", "third b"}
	if !slices.Equal(heard, want) {
		t.Fatalf("heard %q, want %q", heard, want)
	}
}
