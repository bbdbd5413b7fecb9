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

package api_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fqv1alpha1 "github.com/fairqueue/fairqueue/api/v1alpha1"
)

// TestStoreValidation checks spec.store's rules on the API server: every
// invalid store is refused with a message saying what to fix, and the
// documented shapes are accepted.
func TestStoreValidation(t *testing.T) {
	ns := newNamespace(t)
	rejects := []specCase{
		{name: "Redis without redis", spec: "store: {type: Redis}",
			want: []string{"spec.store", "set store.redis exactly when store.type is Redis"}},
		{name: "redis settings with type Memory", spec: "store: {type: Memory, redis: {addresses: ['redis:6379']}}",
			want: []string{"spec.store", "set store.redis exactly when store.type is Redis"}},
		{name: "redis settings with the default type", spec: "store: {redis: {addresses: ['redis:6379']}}",
			want: []string{"spec.store", "set store.redis exactly when store.type is Redis"}},
		{name: "no address", spec: "store: {type: Redis, redis: {addresses: []}}",
			want: []string{"spec.store.redis.addresses", "should have at least 1 items"}},
		{name: "address without a port", spec: "store: {type: Redis, redis: {addresses: ['redis.cache.svc']}}",
			want: []string{"spec.store.redis.addresses", "each address must be host:port"}},
		{name: "address with a scheme", spec: "store: {type: Redis, redis: {addresses: ['redis://redis:6379']}}",
			want: []string{"spec.store.redis.addresses", "each address must be host:port"}},
		{name: "two addresses in Standalone mode", spec: "store: {type: Redis, redis: {addresses: ['a:6379', 'b:6379']}}",
			want: []string{"spec.store.redis.addresses", "mode Standalone takes exactly one address"}},
		{name: "Sentinel without a master name", spec: "store: {type: Redis, redis: {mode: Sentinel, addresses: ['s1:26379', 's2:26379']}}",
			want: []string{"spec.store.redis.sentinelMasterName", "set sentinelMasterName exactly when mode is Sentinel"}},
		{name: "master name outside Sentinel mode", spec: "store: {type: Redis, redis: {addresses: ['a:6379'], sentinelMasterName: mymaster}}",
			want: []string{"spec.store.redis.sentinelMasterName", "set sentinelMasterName exactly when mode is Sentinel"}},
		{name: "Cluster with a database", spec: "store: {type: Redis, redis: {mode: Cluster, addresses: ['a:6379'], db: 2}}",
			want: []string{"spec.store.redis.db", "Redis Cluster has only database 0"}},
		{name: "database above 15", spec: "store: {type: Redis, redis: {addresses: ['a:6379'], db: 16}}",
			want: []string{"spec.store.redis.db", "should be less than or equal to 15"}},
		{name: "timeout zero", spec: "store: {type: Redis, redis: {addresses: ['a:6379'], timeout: 0s}}",
			want: []string{"spec.store.redis.timeout", "timeout must be from 1ms to 5s"}},
		{name: "timeout above 5s", spec: "store: {type: Redis, redis: {addresses: ['a:6379'], timeout: 6s}}",
			want: []string{"spec.store.redis.timeout", "timeout must be from 1ms to 5s"}},
		{name: "timeout too large for a duration", spec: "store: {type: Redis, redis: {addresses: ['a:6379'], timeout: 9999999999999h}}",
			want: []string{"spec.store.redis.timeout", "timeout must be from 1ms to 5s"}},
		{name: "unknown failure mode", spec: "store: {type: Redis, redis: {addresses: ['a:6379'], failureMode: Ignore}}",
			want: []string{"spec.store.redis.failureMode", "Unsupported value"}},
		{name: "unknown store type", spec: "store: {type: Etcd}",
			want: []string{"spec.store.type", "Unsupported value"}},
	}
	expectRejected(t, ns, "store", rejects)

	accepts := []specCase{
		{name: "explicit Memory", spec: "store: {type: Memory}"},
		{name: "Standalone Redis", spec: "store: {type: Redis, redis: {addresses: ['redis.cache.svc.cluster.local:6379'], secretRef: {name: redis-auth}, tls: true, timeout: 20ms, failureMode: Open}}"},
		{name: "IPv6 address", spec: "store: {type: Redis, redis: {addresses: ['[fd00::1]:6379']}}"},
		{name: "Cluster seed nodes", spec: "store: {type: Redis, redis: {mode: Cluster, addresses: ['a:6379', 'b:6379', 'c:6379']}}"},
		{name: "Sentinel", spec: "store: {type: Redis, redis: {mode: Sentinel, addresses: ['s1:26379', 's2:26379', 's3:26379'], sentinelMasterName: mymaster, db: 3}}"},
	}
	expectAccepted(t, ns, "store", accepts)

	t.Run("redis defaults", func(t *testing.T) {
		obj := policyFromSpec(t, ns, "store-defaults", "store: {type: Redis, redis: {addresses: ['redis:6379']}}\n"+backendYAML)
		if err := env.Client.Create(testContext(t), obj); err != nil {
			t.Fatal(err)
		}
		var got fqv1alpha1.FairQueuePolicy
		if err := env.Client.Get(testContext(t), client.ObjectKeyFromObject(obj), &got); err != nil {
			t.Fatal(err)
		}
		want := fqv1alpha1.Store{Type: fqv1alpha1.StoreTypeRedis, Redis: &fqv1alpha1.RedisStore{
			Addresses: []string{"redis:6379"}, Mode: fqv1alpha1.RedisModeStandalone,
			Timeout: fqv1alpha1.Duration("250ms"), FailureMode: fqv1alpha1.StoreFailClosed,
		}}
		if !reflect.DeepEqual(got.Spec.Store, want) {
			t.Errorf("defaulted store = %+v (redis %+v), want %+v (redis %+v)", got.Spec.Store, got.Spec.Store.Redis, want, want.Redis)
		}
	})
}

// specCase is one spec of a CEL table: its name, the spec YAML (without
// backends, which are added), and for a rejected spec the substrings the
// API server's error must contain.
type specCase struct {
	name string
	spec string
	want []string
}

// expectRejected creates each case's policy (named prefix-invalid-N) in ns
// and checks that the API server refuses it with every wanted substring and
// without a rule that failed to evaluate.
func expectRejected(t *testing.T, ns, prefix string, cases []specCase) {
	t.Helper()
	for i, tt := range cases {
		t.Run("rejects "+tt.name, func(t *testing.T) {
			spec := tt.spec + "\n" + backendYAML
			obj := policyFromSpec(t, ns, fmt.Sprintf("%s-invalid-%d", prefix, i), spec)
			err := env.Client.Create(testContext(t), obj)
			if err == nil {
				t.Fatalf("the API server accepted an invalid policy:\n%s", spec)
			}
			if strings.Contains(err.Error(), "evaluating rule") {
				t.Errorf("a validation rule failed to evaluate instead of explaining the problem:\n%v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			expectSameRefusal(t, obj, err, "")
		})
	}
}

// expectAccepted creates each case's policy (named prefix-valid-N) in ns and
// checks that the API server accepts it.
func expectAccepted(t *testing.T, ns, prefix string, cases []specCase) {
	t.Helper()
	for i, tt := range cases {
		t.Run("accepts "+tt.name, func(t *testing.T) {
			spec := tt.spec + "\n" + backendYAML
			obj := policyFromSpec(t, ns, fmt.Sprintf("%s-valid-%d", prefix, i), spec)
			expectSameAcceptance(t, obj)
			if err := env.Client.Create(testContext(t), obj); err != nil {
				t.Fatalf("the API server rejected a valid policy:\n%s\n%v", indent(spec, "  "), err)
			}
		})
	}
}
