package handlers

import (
	"net/netip"
	"testing"
	"time"
)

func TestThrottleBacksOffPerNameAndAddress(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	th := newThrottle()
	th.now = func() time.Time { return now }
	here, there := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	keys := signInKeys("Ada", here)
	for range pairFree {
		if th.wait(keys) != 0 {
			t.Fatal("refused before the free failures were used")
		}
		th.fail(keys)
	}
	if got := th.wait(signInKeys("ADA", here)); got != backoffFirst {
		t.Fatalf("the name (in another case) from the same address waits %s, want %s", got, backoffFirst)
	}
	if got := th.wait(signInKeys("Ada", there)); got != 0 {
		t.Fatalf("the name from another address waits %s: a stranger's guesses lock the operator out", got)
	}
	if got := th.wait(signInKeys("bob", here)); got != 0 {
		t.Fatalf("another name from the address waits %s before the address's own limit", got)
	}

	// Each failure past the free ones doubles the wait, up to the ceiling.
	want := backoffFirst
	for range 8 {
		now = now.Add(th.wait(keys))
		th.fail(keys)
		want = min(2*want, backoffMost)
		if got := th.wait(keys); got != want {
			t.Fatalf("after another failure the wait is %s, want %s", got, want)
		}
	}
	// Trying many names from one address is slowed too.
	if got := th.wait(signInKeys("carol", here)); got == 0 {
		t.Fatal("an address with many failures may go on guessing other names")
	}

	th.reset(keys[:1])
	if th.wait(keys[:1]) != 0 {
		t.Fatal("the name is refused after a sign-in reset it")
	}
	if th.wait(keys[1:]) == 0 {
		t.Fatal("a sign-in reset the address too: one account would unlock guessing the others")
	}
	now = now.Add(forgetAfter)
	if got := th.wait(keys); got != 0 {
		t.Fatalf("still refused %s an hour after the last failure", got)
	}
}

func TestThrottleCountsAnIPv6NetworkAsOne(t *testing.T) {
	th := newThrottle()
	for i := range pairFree {
		a := netip.MustParseAddr("2001:db8:1:2::" + string(rune('1'+i)))
		th.fail(signInKeys("ada", a))
	}
	if th.wait(signInKeys("ada", netip.MustParseAddr("2001:db8:1:2:ffff::9"))) == 0 {
		t.Fatal("guesses from one /64, an address each, are not counted together")
	}
	if th.wait(signInKeys("ada", netip.MustParseAddr("2001:db8:1:3::1"))) != 0 {
		t.Fatal("another /64 is refused")
	}
}

func TestForwardedFor(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name   string
		values []string
		want   string
	}{
		{"one hop", []string{"203.0.113.9"}, "203.0.113.9"},
		{"a forged head is skipped", []string{"192.0.2.66, 203.0.113.9"}, "203.0.113.9"},
		{"through two proxies", []string{"203.0.113.9, 10.1.2.3"}, "203.0.113.9"},
		{"several headers", []string{"192.0.2.66", "203.0.113.9"}, "203.0.113.9"},
		{"with a port", []string{"[2001:db8::1]:4000"}, "2001:db8::1"},
		{"only proxies", []string{"10.1.2.3"}, ""},
		{"garbage", []string{"not-an-address"}, ""},
		{"none", nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := forwardedFor(tc.values, trusted)
			if (tc.want == "") == ok || (ok && got.String() != tc.want) {
				t.Fatalf("forwardedFor(%q) = %v, %v; want %q", tc.values, got, ok, tc.want)
			}
		})
	}
}
