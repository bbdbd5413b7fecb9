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

package v1alpha1

// Data keys of store.redis.secretRef. The timeout's default lives in
// dataplane/config (DefaultStoreTimeout); test/api checks the marker's.
const (
	// RedisSecretUsernameKey is the optional data key of store.redis.secretRef
	// holding the ACL user name.
	RedisSecretUsernameKey = "username"
	// RedisSecretPasswordKey is the optional data key of store.redis.secretRef
	// holding the password.
	RedisSecretPasswordKey = "password"
	// RedisSecretCAKey is the optional data key of store.redis.secretRef
	// holding PEM CA certificates trusted for TLS, in addition to the system
	// roots.
	RedisSecretCAKey = "ca.crt"
)

// StoreType is where the data plane keeps rate-limit bucket state.
// +kubebuilder:validation:Enum=Memory;Redis
type StoreType string

const (
	// StoreTypeMemory keeps buckets in each replica's memory.
	StoreTypeMemory StoreType = "Memory"
	// StoreTypeRedis keeps buckets in a Redis shared by all replicas.
	StoreTypeRedis StoreType = "Redis"
)

// RedisMode says how store.redis.addresses are read.
// +kubebuilder:validation:Enum=Standalone;Cluster;Sentinel
type RedisMode string

const (
	// RedisModeStandalone is one Redis server at exactly one address.
	RedisModeStandalone RedisMode = "Standalone"
	// RedisModeCluster is a Redis Cluster reached through seed nodes.
	RedisModeCluster RedisMode = "Cluster"
	// RedisModeSentinel is a primary found through Redis Sentinel.
	RedisModeSentinel RedisMode = "Sentinel"
)

// StoreFailureMode is what the data plane does while Redis is unreachable.
// +kubebuilder:validation:Enum=Closed;Open
type StoreFailureMode string

const (
	// StoreFailClosed answers 503 store_unavailable.
	StoreFailClosed StoreFailureMode = "Closed"
	// StoreFailOpen falls back to per-replica buckets holding each limit
	// divided by the number of live replicas.
	StoreFailOpen StoreFailureMode = "Open"
)

// Store says where rate-limit bucket state is kept.
// +kubebuilder:validation:XValidation:rule="(has(self.type) && self.type == 'Redis') == has(self.redis)",message="set store.redis exactly when store.type is Redis: type Redis needs redis.addresses, and type Memory takes no redis settings"
type Store struct {
	// type is Memory (the default) or Redis. With Memory each data-plane
	// replica keeps its own buckets, so N replicas admit N times every limit.
	// With Redis every replica charges the same buckets in Redis, so the
	// limits hold for the whole fleet. Defaults to "Memory".
	// +optional
	// +kubebuilder:default=Memory
	Type StoreType `json:"type,omitempty"`

	// redis locates the shared Redis; required when type is Redis.
	// +optional
	Redis *RedisStore `json:"redis,omitempty"`
}

// RedisStore is the Redis shared by a policy's data-plane replicas.
// +kubebuilder:validation:XValidation:rule="has(self.mode) && self.mode != 'Standalone' || size(self.addresses) == 1",message="mode Standalone takes exactly one address; use mode Cluster for cluster seed nodes or mode Sentinel for sentinels",fieldPath=".addresses"
// +kubebuilder:validation:XValidation:rule="(has(self.mode) && self.mode == 'Sentinel') == has(self.sentinelMasterName)",message="set sentinelMasterName exactly when mode is Sentinel: it names the primary in the sentinels' configuration",fieldPath=".sentinelMasterName"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'Cluster' || !has(self.db) || self.db == 0",message="Redis Cluster has only database 0; remove db or set it to 0",fieldPath=".db"
type RedisStore struct {
	// addresses are host:port pairs: exactly one for mode Standalone (a
	// server, or a proxy in front of several), seed nodes for Cluster,
	// sentinels for Sentinel. At most 16.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:XValidation:rule="self.all(a, a.matches('^([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?|[[][0-9A-Fa-f:.]+[]]):[0-9]{1,5}$'))",message="each address must be host:port, such as redis.cache.svc:6379 or [fd00::1]:6379"
	Addresses []string `json:"addresses"`

	// mode says how addresses are read: Standalone (the default), Cluster
	// or Sentinel. Defaults to "Standalone".
	// +optional
	// +kubebuilder:default=Standalone
	Mode RedisMode `json:"mode,omitempty"`

	// sentinelMasterName is the name of the primary in the sentinels'
	// configuration; required with mode Sentinel and refused otherwise.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	SentinelMasterName string `json:"sentinelMasterName,omitempty"`

	// secretRef names a Secret, in the policy's namespace, holding the
	// optional data keys "username" and "password" (an ACL user, or the
	// password alone for requirepass) and "ca.crt" (PEM CA certificates
	// trusted for TLS besides the system roots). The data plane reads it by
	// name; the rendered ConfigMap holds only its name, and is written only
	// once the Secret exists.
	// +optional
	SecretRef *LocalSecretReference `json:"secretRef,omitempty"`

	// db is the logical database, from 0 (the default) to 15; Redis Cluster
	// has only 0. Defaults to 0.
	// +optional
	// +kubebuilder:default=0
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=15
	DB int32 `json:"db,omitempty"`

	// tls connects with TLS, verifying the server against the system roots
	// and the secret's ca.crt. Defaults to false.
	// +optional
	// +kubebuilder:default=false
	TLS bool `json:"tls,omitempty"`

	// timeout bounds every store call on the request path, from 1ms to 5s;
	// a call that takes longer fails as failureMode says. Defaults to "250ms".
	// +optional
	// +kubebuilder:default="250ms"
	// +kubebuilder:validation:XValidation:rule="!self.matches('^([0-9]+([.][0-9]+)?(ns|us|ms|s|m|h))+$') || (self.matches('^(([0-9]{1,5}([.][0-9]+)?h)|([0-9]{1,7}([.][0-9]+)?m)|([0-9]{1,9}([.][0-9]+)?s)|([0-9]{1,12}([.][0-9]+)?ms)|([0-9]{1,15}([.][0-9]+)?us)|([0-9]{1,18}([.][0-9]+)?ns)){1,6}$') && duration(self) >= duration('1ms') && duration(self) <= duration('5s'))",message="timeout must be from 1ms to 5s, such as 50ms"
	Timeout Duration `json:"timeout,omitzero"`

	// failureMode is what happens while Redis is unreachable: Closed (the
	// default) answers 503 store_unavailable at once; Open decides by
	// per-replica in-memory buckets holding each limit divided by the number
	// of live replicas. Either way the data plane returns to Redis within
	// about a second of it answering again. Defaults to "Closed".
	// +optional
	// +kubebuilder:default=Closed
	FailureMode StoreFailureMode `json:"failureMode,omitempty"`
}
