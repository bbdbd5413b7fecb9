package demo

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
)

// maxBalancedClients bounds the per-client counters of a balancer; clients
// beyond it share one counter.
const maxBalancedClients = 1024

// balancer is an http.RoundTripper that spreads each client's requests (told
// apart by their Authorization header) round-robin over the replicas, so
// every replica sees the same mix of tenants, as behind a load balancer that
// balances requests rather than connections. One round-robin over all
// clients together would, with periodic arrivals, send one tenant's requests
// mostly to one replica and another's mostly to the other.
type balancer struct {
	next  http.RoundTripper
	hosts []string

	mu    sync.Mutex
	turns map[string]int
}

// newBalancer spreads requests over the hosts of targets (base URLs).
func newBalancer(next http.RoundTripper, targets []string) (*balancer, error) {
	b := &balancer{next: next, turns: map[string]int{}}
	for _, t := range targets {
		u, err := url.Parse(t)
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("target %q is not a base URL such as http://127.0.0.1:8080", t)
		}
		b.hosts = append(b.hosts, u.Host)
	}
	if len(b.hosts) == 0 {
		return nil, fmt.Errorf("no target to balance over")
	}
	return b, nil
}

// RoundTrip implements http.RoundTripper: it sends req to the client's next
// replica in turn.
func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	client := req.Header.Get("Authorization")
	b.mu.Lock()
	if _, ok := b.turns[client]; !ok && len(b.turns) >= maxBalancedClients {
		client = ""
	}
	turn := b.turns[client]
	b.turns[client] = turn + 1
	b.mu.Unlock()
	host := b.hosts[turn%len(b.hosts)]
	if req.URL.Host != host {
		req = req.Clone(req.Context())
		req.URL.Host, req.Host = host, ""
	}
	return b.next.RoundTrip(req)
}
