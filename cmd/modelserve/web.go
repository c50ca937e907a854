package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"modelserve/internal/auth"
)

// web is how the console is reached and how its cookies are kept, read
// from the configuration before anything is served, so that a bad setting
// stops the start with a sentence rather than serving insecurely.
type web struct {
	// keys sign and encrypt the session cookie; keySource says where
	// they came from, for the log.
	keys      auth.SessionKeys
	keySource string
	// secure marks cookies Secure over plain HTTP: TLS ends at a proxy
	// (--public-url https://...).
	secure bool
	// trusted are the proxies whose forwarded headers are believed.
	trusted []netip.Prefix
	// tls, when not nil, serves HTTPS directly.
	tls *tls.Config
}

func webSettings(cfg config) (web, error) {
	var w web
	var err error
	if cfg.SessionSecret != "" {
		if w.keys, err = auth.KeysFromSecret(cfg.SessionSecret); err != nil {
			return web{}, err
		}
		w.keySource = "MODELSERVE_SESSION_SECRET"
	} else {
		file := filepath.Join(cfg.Data, auth.KeyFileName)
		if w.keys, err = auth.LoadKeyFile(file); err != nil {
			return web{}, err
		}
		w.keySource = file
	}

	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return web{}, errors.New("HTTPS needs both --tls-cert and --tls-key (or MODELSERVE_TLS_CERT and MODELSERVE_TLS_KEY); only one is given")
	}
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return web{}, fmt.Errorf("cannot serve HTTPS with %s and %s: %w; give a PEM certificate and its PEM key", cfg.TLSCert, cfg.TLSKey, err)
		}
		w.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	if w.trusted, err = parseProxies(cfg.TrustProxy); err != nil {
		return web{}, err
	}
	if cfg.PublicURL != "" {
		u, err := url.Parse(cfg.PublicURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return web{}, fmt.Errorf("--public-url %q is not an address like https://models.example.com", cfg.PublicURL)
		}
		w.secure = u.Scheme == "https"
	}
	return w, nil
}

// parseProxies reads --trust-proxy: addresses or CIDR ranges, separated by
// commas or spaces.
func parseProxies(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == ' ' }) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			a, aerr := netip.ParseAddr(f)
			if aerr != nil {
				return nil, fmt.Errorf("--trust-proxy: %q is not an address or a CIDR range like 127.0.0.1/32 or 10.0.0.0/8", f)
			}
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// serve serves srv on ln, over TLS when configured.
func (w web) serve(srv *http.Server, ln net.Listener) error {
	if w.tls == nil {
		return srv.Serve(ln)
	}
	srv.TLSConfig = w.tls
	return srv.ServeTLS(ln, "", "")
}

// scheme is how the console is reached on its own address, for the log.
func (w web) scheme() string {
	if w.tls != nil {
		return "https"
	}
	return "http"
}

// privateDir makes the data directory readable by modelserve's user alone
// (0700), creating it when missing. It holds the database (password
// hashes, sessions) and the session key file, and the mirror's files, which
// may be gated models the registry gave to one account. A directory left
// open by an older modelserve is closed.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("cannot create the data directory %s: %w", dir, err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot read the data directory %s: %w", dir, err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, info.Mode().Perm()&0o700); err != nil {
			return fmt.Errorf("cannot make the data directory %s private (%w): chmod 700 it, or run modelserve as its owner", dir, err)
		}
	}
	return nil
}
