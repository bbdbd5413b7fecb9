/*
Copyright 2026 The fairqueue Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package redisstore

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// followCluster makes a Redis Cluster client read the cluster's slot table
// again after a failed health check (a no-op for other clients).
//
// The health check charges a probe bucket under the policy's hash tag, so on
// a Cluster it reaches the master owning the policy's slot (every key of the
// policy shares that slot), not any node: a PING routed to another node would
// succeed while the owner is dead. When that owner does not answer, the
// client's view of the cluster must be reloaded (ClusterClient.ReloadState):
// a dead master sends no MOVED, and otherwise the client refreshes its slot
// table only once a minute, so after a failover it would keep calling the
// dead master. The reload runs in the background; the next probe, one probe
// interval later, asks the new owner.
func followCluster(ctx context.Context, c redis.UniversalClient) {
	if cc, ok := c.(*redis.ClusterClient); ok {
		cc.ReloadState(ctx)
	}
}
