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
	"fmt"

	"github.com/redis/go-redis/v9"
)

// ping checks, for the health probe, that c can serve the policy's keys.
//
// On a Redis Cluster that means the master owning the policy's slot (every
// key of the policy carries its hash tag, so they share one slot), not any
// node: a PING routed to another node succeeds while the owner is dead, and
// the store would return to Redis only to fail the next call, over and over.
// When the owner does not answer, the client's view of the cluster is
// reloaded (ClusterClient.ReloadState): a dead master sends no MOVED, and
// otherwise the client refreshes its slot table only once a minute, so after
// a failover it would keep calling the dead master. The reload runs in the
// background; the next probe, one probe interval later, asks the new owner.
// Elsewhere (a single server, Sentinel) it is a PING.
func (s *Store) ping(ctx context.Context, c redis.UniversalClient) error {
	cc, ok := c.(*redis.ClusterClient)
	if !ok {
		return c.Ping(ctx).Err()
	}
	node, err := cc.MasterForKey(ctx, s.hashTag)
	if err == nil {
		err = node.Ping(ctx).Err()
	}
	if err != nil {
		cc.ReloadState(ctx)
		return fmt.Errorf("the cluster master serving the policy's slot does not answer (reloading the cluster's slot table): %w", err)
	}
	return nil
}
