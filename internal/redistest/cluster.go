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

package redistest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultCLI is the redis-cli run to create a cluster.
const DefaultCLI = "redis-cli"

// ClusterNodeTimeout is the cluster-node-timeout of a launched cluster: a
// master unreachable this long is failed over to its replica.
const ClusterNodeTimeout = time.Second

// ClusterTimeout bounds how long LaunchCluster waits for the new cluster to
// agree that it is healthy (cluster_state:ok on every node).
const ClusterTimeout = 20 * time.Second

// Cluster is a Redis Cluster of real redis-server child processes on
// loopback ports, created by redis-cli --cluster create, with a short
// cluster-node-timeout (ClusterNodeTimeout) so a killed master fails over
// in seconds. Nodes are the masters first, then the replicas, as redis-cli
// assigns them at creation; a failover changes who is master.
type Cluster struct {
	Nodes []*Server
}

// NeedCluster returns the paths of redis-server and redis-cli, skipping the
// test when either is absent outside CI and failing it under CI.
func NeedCluster(t testing.TB) (server, cli string) {
	t.Helper()
	return Need(t), need(t, DefaultCLI, "redis-tools", "Redis Cluster")
}

// StartCluster starts a cluster of the given number of masters, each with
// the given number of replicas, for a test, and kills every node when the test ends. It skips the
// test when redis-server or redis-cli is not installed, and fails it under
// CI.
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	server, cli := NeedCluster(t)
	c, err := LaunchCluster(context.Background(), server, cli, t.TempDir(), masters, replicas)
	if c != nil {
		t.Cleanup(func() { _ = c.Kill() })
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// LaunchCluster starts masters*(1+replicas) redis-server processes in
// cluster mode, each with its own directory under dir, joins them with
// redis-cli (cli; DefaultCLI when empty) and waits until every node reports
// cluster_state:ok, at most ClusterTimeout or until ctx ends. On failure the
// nodes started so far are returned with the error, for the caller to kill.
func LaunchCluster(ctx context.Context, bin, cli, dir string, masters, replicas int) (*Cluster, error) {
	if masters < 3 {
		return nil, fmt.Errorf("a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	if cli == "" {
		cli = DefaultCLI
	}
	c := &Cluster{}
	for i := range masters * (1 + replicas) {
		busPort, err := freePort()
		if err != nil {
			return c, err
		}
		nodeDir := filepath.Join(dir, "node"+strconv.Itoa(i)) // each node writes its own nodes.conf
		if err := os.MkdirAll(nodeDir, 0o700); err != nil {
			return c, err
		}
		s, err := Launch(ctx, bin, nodeDir,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.FormatInt(ClusterNodeTimeout.Milliseconds(), 10),
			"--cluster-port", busPort,
			// A replica may take over however long ago it last heard
			// from its master: on a busy test machine that can be a while.
			"--cluster-replica-validity-factor", "0")
		if err != nil {
			return c, err
		}
		c.Nodes = append(c.Nodes, s)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.Nodes {
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	cctx, cancel := context.WithTimeout(ctx, ClusterTimeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(cctx, cli, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return c, fmt.Errorf("%s --cluster create: %w; output:\n%s", cli, err, out.String())
	}
	if err := c.WaitHealthy(cctx); err != nil {
		return c, err
	}
	return c, c.waitReplicasSynced(cctx)
}

// waitReplicasSynced waits until every replica has synchronised with its
// master (master_link_status:up): one that never has cannot take over.
func (c *Cluster) waitReplicasSynced(ctx context.Context) error {
	return poll(ctx, 50*time.Millisecond, "redis cluster replicas not synchronised", func() error {
		var last error
		for _, s := range c.running() {
			info, err := nodeCall(ctx, s, func(ctx context.Context, rc *redis.Client) (string, error) {
				return rc.Info(ctx, "replication").Result()
			})
			switch {
			case err != nil:
				last = err
			case strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up"):
				last = fmt.Errorf("replica %s has not synchronised with its master yet", s.Addr())
			}
		}
		return last
	})
}

// Addrs returns every node's host:port.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		out[i] = s.Addr()
	}
	return out
}

// Kill kills every node.
func (c *Cluster) Kill() error {
	var errs []error
	for _, s := range c.Nodes {
		errs = append(errs, s.Kill())
	}
	return errors.Join(errs...)
}

// nodeCall runs f on a short-lived client of node s.
func nodeCall[T any](ctx context.Context, s *Server, f func(context.Context, *redis.Client) (T, error)) (T, error) {
	rc := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
		ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond, PoolSize: 1})
	defer func() { _ = rc.Close() }()
	return f(ctx, rc)
}

// State returns node s's cluster_state ("ok" or "fail").
func State(ctx context.Context, s *Server) (string, error) {
	info, err := nodeCall(ctx, s, func(ctx context.Context, rc *redis.Client) (string, error) { return rc.ClusterInfo(ctx).Result() })
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("CLUSTER INFO of %s has no cluster_state", s.Addr())
}

// Owner returns the address of the master that node s says serves key's
// slot.
func Owner(ctx context.Context, s *Server, key string) (string, error) {
	return nodeCall(ctx, s, func(ctx context.Context, rc *redis.Client) (string, error) {
		slot, err := rc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return "", err
		}
		shards, err := rc.ClusterShards(ctx).Result()
		if err != nil {
			return "", err
		}
		for _, sh := range shards {
			for _, r := range sh.Slots {
				if r.Start > slot || slot > r.End {
					continue
				}
				for _, n := range sh.Nodes {
					if n.Role == "master" {
						return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), nil
					}
				}
			}
		}
		return "", fmt.Errorf("node %s knows no master for slot %d", s.Addr(), slot)
	})
}

// Node returns the node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// they all name the same, running master for every slot range; it polls
// every 50 ms until ctx ends.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, 50*time.Millisecond, "redis cluster not healthy", func() error { return c.healthy(ctx) })
}

// WaitOwner waits until every running node reports cluster_state:ok and
// names a running master other than not as the owner of key's slot, and
// returns that master's address.
func (c *Cluster) WaitOwner(ctx context.Context, key, not string) (string, error) {
	var owner string
	err := poll(ctx, 20*time.Millisecond, fmt.Sprintf("redis cluster did not fail %q over", key), func() error {
		o, err := c.agreedOwner(ctx, key)
		switch {
		case err != nil:
			return err
		case o == not:
			return fmt.Errorf("the nodes still name %s as the owner of %q", not, key)
		}
		if err := c.healthy(ctx); err != nil {
			return err
		}
		owner = o
		return nil
	})
	if err != nil {
		return "", err
	}
	return owner, nil
}

// agreedOwner returns the owner of key's slot that every running node names.
func (c *Cluster) agreedOwner(ctx context.Context, key string) (string, error) {
	owner := ""
	for _, s := range c.running() {
		o, err := Owner(ctx, s, key)
		if err != nil {
			return "", err
		}
		if owner != "" && o != owner {
			return "", fmt.Errorf("nodes disagree on the owner of %q: %s and %s", key, owner, o)
		}
		owner = o
	}
	if c.Node(owner) == nil || !c.Node(owner).Running() {
		return "", fmt.Errorf("the owner of %q, %s, is not running", key, owner)
	}
	return owner, nil
}

// healthy reports why the running nodes are not all cluster_state:ok.
func (c *Cluster) healthy(ctx context.Context) error {
	for _, s := range c.running() {
		st, err := State(ctx, s)
		if err != nil {
			return err
		}
		if st != "ok" {
			return fmt.Errorf("node %s reports cluster_state:%s", s.Addr(), st)
		}
	}
	return nil
}

func (c *Cluster) running() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if s.Running() {
			out = append(out, s)
		}
	}
	return out
}
