package resolver

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
)

// trustedProxies decides the client address of a request.
type trustedProxies []netip.Prefix

// clientAddr returns the address the per-client limit is keyed by: the
// connection's peer, or, when the peer is a trusted proxy, the right-most
// X-Forwarded-For entry that is not itself a trusted proxy.
func (tp trustedProxies) clientAddr(r *http.Request) string {
	peer := hostOnly(r.RemoteAddr)
	if len(tp) == 0 || !tp.contains(peer) {
		return peer
	}
	values := r.Header["X-Forwarded-For"]
	client := peer
	for i := len(values) - 1; i >= 0; i-- {
		v := values[i]
		for v != "" {
			var hop string
			if j := strings.LastIndexByte(v, ','); j >= 0 {
				hop, v = strings.TrimSpace(v[j+1:]), v[:j]
			} else {
				hop, v = strings.TrimSpace(v), ""
			}
			if hop == "" {
				continue
			}
			if _, err := netip.ParseAddr(hop); err != nil {
				return client // garbage in the chain: stop at the last trusted hop
			}
			client = hop
			if !tp.contains(hop) {
				return client
			}
		}
	}
	return client
}

func (tp trustedProxies) contains(addr string) bool {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return false
	}
	a = a.Unmap()
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// hostOnly strips the port (and IPv6 brackets) from a host:port string
// without allocating.
func hostOnly(hostport string) string {
	if i := strings.LastIndexByte(hostport, ':'); i >= 0 && strings.IndexByte(hostport[i:], ']') < 0 {
		hostport = hostport[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// ParseTrustedProxies parses a comma-separated list of CIDRs or addresses,
// as given to --trusted-proxies.
func ParseTrustedProxies(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, errors.New("trusted proxy " + `"` + f + `"` + " is neither a CIDR (10.0.0.0/8) nor an IP address")
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}
