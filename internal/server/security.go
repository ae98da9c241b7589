package server

import (
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
)

// A server on loopback without an API key is reachable from every web page
// the user visits, through the browser. Two rules keep pages out:
//
//   - POST bodies must be application/json. A page can send a "simple"
//     cross-origin request (text/plain, form data) without asking the server
//     first; a JSON one needs a CORS preflight, which only --cors-origin
//     origins pass.
//   - The Host header must name this server: an IP address, localhost (or a
//     name under .localhost), or a name given with --allowed-host. A page
//     that rebinds its own name to 127.0.0.1 (DNS rebinding) is same-origin
//     with the server as far as the browser knows, so CORS does not stop it
//     from reading answers; its requests carry its own name as Host, which
//     is refused here. An IP address cannot be rebound: a page whose origin
//     is an address was served from that address.

// hostPolicy decides which Host headers are answered.
type hostPolicy struct {
	any   bool            // "*" was given: every Host
	names map[string]bool // lower case, without port or trailing dot
}

// newHostPolicy reads Config.AllowedHosts: names (or addresses) without a
// port, or "*" for any.
func newHostPolicy(allowed []string) (*hostPolicy, error) {
	p := &hostPolicy{names: map[string]bool{}}
	for _, name := range allowed {
		if name == "*" {
			p.any = true
			continue
		}
		bare := strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
		if net.ParseIP(bare) == nil && (bare == "" || strings.ContainsAny(bare, ":/@[] \t")) {
			return nil, fmt.Errorf("server: allowed host %q: want a host name or an IP address, without a port or scheme (or * for any)", name)
		}
		p.names[canonicalHost(bare)] = true
	}
	return p, nil
}

// CheckAllowedHosts reports the first of names that Config.AllowedHosts
// would refuse (a port, a scheme), so that a program can check them before
// it loads a model.
func CheckAllowedHosts(names []string) error {
	_, err := newHostPolicy(names)
	return err
}

// canonicalHost is a Host header's host, port and brackets removed, in
// lower case and without a trailing dot ("LocalHost.:8080" is "localhost").
func canonicalHost(hostport string) string {
	h := hostport
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// allows reports whether a request to host is answered.
func (p *hostPolicy) allows(host string) bool {
	if p.any || host == "" { // no Host: HTTP/1.0 from a program, not a browser
		return true
	}
	h := canonicalHost(host)
	if net.ParseIP(h) != nil || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	return p.names[h]
}

// checkHost refuses requests whose Host is not a name this server answers
// to (403), on TCP; a Unix socket is out of a browser's reach.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok && addr.Network() == "unix" || s.hosts.allows(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		writeError(w, &apiError{status: http.StatusForbidden, kind: "invalid_request_error", code: "host_not_allowed",
			message: fmt.Sprintf("Host %q is not a name this server answers to: use its IP address or localhost, or start it with --allowed-host NAME", r.Host)})
	})
}

// requireJSON refuses a POST whose body is not declared application/json
// (with no charset, or UTF-8, JSON's) with 415.
func requireJSON(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		ct := r.Header.Get("Content-Type")
		mt, params, err := mime.ParseMediaType(ct)
		charset, hasCharset := params["charset"]
		if err != nil || mt != "application/json" || hasCharset && !strings.EqualFold(charset, "utf-8") && !strings.EqualFold(charset, "utf8") {
			writeError(w, &apiError{status: http.StatusUnsupportedMediaType, kind: "invalid_request_error", code: "unsupported_media_type",
				message: fmt.Sprintf("Content-Type %q: a POST body must be application/json (UTF-8)", ct)})
			return
		}
		next.ServeHTTP(w, r)
	})
}
