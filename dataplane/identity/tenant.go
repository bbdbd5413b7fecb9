package identity

import "fmt"

// Dimension names the identity a request is queued under. The values are the
// tenantDimension enum of the FairQueuePolicy API and the tenant_dimension
// metric label.
type Dimension string

const (
	// DimensionUser queues requests by user id. It is the default.
	DimensionUser Dimension = "user"
	// DimensionAPIKey queues requests by API key.
	DimensionAPIKey Dimension = "apiKey"
	// DimensionTeam queues requests by team id.
	DimensionTeam Dimension = "team"
)

// ParseDimension returns the Dimension named by s. The empty string means the
// default, DimensionUser.
func ParseDimension(s string) (Dimension, error) {
	switch d := Dimension(s); d {
	case "":
		return DimensionUser, nil
	case DimensionUser, DimensionAPIKey, DimensionTeam:
		return d, nil
	}
	return "", fmt.Errorf("unknown tenant dimension %q: use %q, %q or %q", s, DimensionUser, DimensionAPIKey, DimensionTeam)
}

// Set holds the resolved identities of one request as hashes (see Hash). An
// empty field means the identity is absent; the HTTP layer maps a placeholder
// team (empty or the configured "no team" value) to absent before hashing.
type Set struct {
	// APIKey is the hash of the request's API key.
	APIKey string
	// User is the hash of the request's user id.
	User string
	// Team is the hash of the request's team id.
	Team string
}

// get returns the hash held for d.
func (s Set) get(d Dimension) string {
	switch d {
	case DimensionUser:
		return s.User
	case DimensionAPIKey:
		return s.APIKey
	case DimensionTeam:
		return s.Team
	}
	return ""
}

// fallback is the fixed order tried when the preferred identity is absent, so
// the same request always lands in the same queue.
var fallback = [...]Dimension{DimensionUser, DimensionTeam, DimensionAPIKey}

// Tenant returns the tenant key a request is queued under: the identity named
// by preferred if present, else the first present one of user, team, API key.
// It reports the dimension actually used; ok is false when the request has no
// identity at all and so must not be queued.
func (s Set) Tenant(preferred Dimension) (key string, used Dimension, ok bool) {
	if k := s.get(preferred); k != "" {
		return k, preferred, true
	}
	for _, d := range fallback {
		if k := s.get(d); k != "" {
			return k, d, true
		}
	}
	return "", "", false
}
