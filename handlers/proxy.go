package handlers

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// Behind a proxy that ends TLS, every request comes from the proxy's
// address over plain HTTP. The proxy says who the client was
// (X-Forwarded-For) and how it reached the proxy (X-Forwarded-Proto), but
// anyone can send those headers: they are believed only from an address
// in Deps.TrustedProxies. Believed, the client's address is what the
// sign-in throttle counts and the logs show, and HTTPS makes the session
// cookie Secure.

// fromProxy reads the forwarded headers of a request from a trusted proxy
// and leaves any other request as it came.
func (s *Server) fromProxy(next http.Handler) http.Handler {
	trusted := s.deps.TrustedProxies
	if len(trusted) == 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer, ok := addrOf(r.RemoteAddr)
		if !ok || !isTrusted(trusted, peer) {
			next.ServeHTTP(w, r)
			return
		}
		ctx := r.Context()
		proto, _, _ := strings.Cut(r.Header.Get("X-Forwarded-Proto"), ",")
		if strings.EqualFold(strings.TrimSpace(proto), "https") {
			ctx = withHTTPS(ctx)
		}
		r = r.WithContext(ctx)
		if client, ok := forwardedFor(r.Header.Values("X-Forwarded-For"), trusted); ok {
			r.RemoteAddr = netip.AddrPortFrom(client, 0).String()
		}
		next.ServeHTTP(w, r)
	})
}

// forwardedFor is the client a chain of proxies reports: the last address
// of X-Forwarded-For that is not a trusted proxy. Addresses before it were
// written by the client itself, and prove nothing.
func forwardedFor(values []string, trusted []netip.Prefix) (netip.Addr, bool) {
	var hops []string
	for _, v := range values {
		hops = append(hops, strings.Split(v, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := addrOf(strings.TrimSpace(hops[i]))
		if !ok {
			// Not an address: whatever lies before it cannot be trusted.
			return netip.Addr{}, false
		}
		if !isTrusted(trusted, a) {
			return a, true
		}
	}
	return netip.Addr{}, false
}

func isTrusted(trusted []netip.Prefix, a netip.Addr) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// addrOf reads an address with or without a port ("10.0.0.1:5000",
// "[::1]:80", "10.0.0.1", "::1"), IPv4 in IPv6 as IPv4.
func addrOf(s string) (netip.Addr, bool) {
	if host, _, err := net.SplitHostPort(s); err == nil {
		s = host
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap().WithZone(""), true
}

// clientAddr is the address a request came from: the client's, behind a
// trusted proxy (fromProxy has put it in RemoteAddr).
func clientAddr(r *http.Request) netip.Addr {
	a, _ := addrOf(r.RemoteAddr)
	return a
}
