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

// Package limitertest holds limiter test doubles shared by the packages that
// build on the limiter.
package limitertest

import (
	"time"

	"github.com/fairqueue/fairqueue/dataplane/limiter"
)

// DownStore is a limiter store whose backing state cannot be reached: every
// call fails with limiter.ErrStoreUnavailable, as a Redis outage does.
type DownStore struct{}

var _ limiter.Store = DownStore{}

// Take fails: the store is down.
func (DownStore) Take(time.Time, limiter.Batch) (limiter.Decision, error) {
	return limiter.Decision{}, limiter.ErrStoreUnavailable
}

// Peek fails: the store is down.
func (DownStore) Peek(time.Time, limiter.Batch) (limiter.Decision, error) {
	return limiter.Decision{}, limiter.ErrStoreUnavailable
}

// Refund fails: the store is down.
func (DownStore) Refund(time.Time, limiter.Batch) error { return limiter.ErrStoreUnavailable }

// Adjust fails: the store is down.
func (DownStore) Adjust(time.Time, limiter.Batch) error { return limiter.ErrStoreUnavailable }
