package operr

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestWrapKeepsTheCauseAndTheSentence(t *testing.T) {
	sentinel := errors.New("gated repository")
	err := fmt.Errorf("reading acme/x: %w", Wrap(Forbidden, sentinel, "%s is gated: ask for access", "acme/x"))
	e, ok := As(err)
	if !ok || e.Kind != Forbidden || e.Msg != "acme/x is gated: ask for access" {
		t.Fatalf("As = %+v, %v", e, ok)
	}
	if !errors.Is(err, sentinel) {
		t.Error("the cause is lost")
	}
	if _, ok := As(errors.New("a Go error")); ok {
		t.Error("a plain error passed for an operator's")
	}
}

func TestQuoteBoundsWhatIsEchoed(t *testing.T) {
	if got := Quote("acme/x"); got != `"acme/x"` {
		t.Errorf("Quote = %s", got)
	}
	long := strings.Repeat("é", 5000)
	if got := Quote(long); len(got) > 250 || !strings.HasSuffix(got, `é"… (9.8 KB cut)`) {
		t.Errorf("Quote of 5000 characters is %d bytes long: %s", len(got), got)
	}
}
