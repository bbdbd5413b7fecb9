package config_test

import (
	"fmt"

	"github.com/fairqueue/fairqueue/dataplane/config"
)

// The data plane refuses a config that fails validation, naming every bad
// field, and keeps the last good one in force.
func ExampleParse() {
	_, err := config.Parse([]byte(`{
	  "apiVersion": "fairqueue.dev/v1alpha1",
	  "kind": "DataPlaneConfig",
	  "policy": {"namespace": "team-a", "name": "llm", "generation": 1},
	  "hashKeySecret": {"namespace": "team-a", "name": "llm-hash-key", "key": "key", "fingerprint": "0123456789abcdef"},
	  "identity": {"apiKeyHeaders": ["Authorization"], "trustHeaders": false},
	  "rateLimits": {},
	  "fairQueuing": {
	    "enabled": true, "tenantDimension": "user", "defaultWeight": 1,
	    "bounds": {"maxQueueDepthPerTenant": 32, "maxTotalQueued": 4096, "maxTenants": 1024, "maxInFlight": 0, "maxWait": "5s"}
	  },
	  "timeouts": {"requestTotal": "60s"}
	}`))
	fmt.Println(err)
	// Output: fairQueuing.bounds.maxInFlight: must be >= 1, got 0
}
