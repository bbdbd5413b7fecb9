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

// Package configtest builds data-plane configs for tests and tools, so the
// shape of a minimal valid config is written once.
package configtest

import (
	"github.com/fairqueue/fairqueue/dataplane/config"
	"github.com/fairqueue/fairqueue/dataplane/identity"
)

// Key is a 32-byte hash key for tests that need no particular one.
var Key = []byte("0123456789abcdef0123456789abcdef")

// Valid returns a minimal valid config for policy ns/llm: the fingerprint of
// key, API keys from Authorization, fair queuing by user (off), default
// bounds, no limits and one backend b1 at backendURL. Callers change what
// they exercise.
func Valid(key []byte, backendURL string) *config.Config {
	return &config.Config{
		APIVersion:    config.APIVersion,
		Kind:          config.Kind,
		Policy:        config.PolicyRef{Namespace: "ns", Name: "llm", Generation: 1},
		HashKeySecret: config.HashKeySecret{Namespace: "ns", Name: "llm-hash-key", Key: "key", Fingerprint: config.KeyFingerprint(key)},
		Identity:      config.Identity{APIKeyHeaders: []string{"Authorization"}},
		FairQueuing:   config.FairQueuing{TenantDimension: identity.DimensionUser, DefaultWeight: 1, Bounds: config.DefaultBounds()},
		Backends:      []config.Backend{{Name: "b1", URL: backendURL, Weight: 1}},
	}
}
