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

// Package capacity counts the requests in flight at each backend and says
// when a backend can take no more (SPEC 6b): at its maxInFlight, or when a
// fresh saturation signal read from the backend's own Prometheus metrics is
// over its max. It is the mechanism only; admission decides what a refused
// request does (wait in the fair queue, or a 429 limit_type capacity).
//
// # Slots
//
// Tracker.Acquire takes a slot on a backend into a Slot the caller owns
// (usually a field of its per-request ticket, so taking one allocates
// nothing): one atomic load of the current backends, a map lookup, and a
// compare-and-swap on the backend's count. Slot.Release gives it back
// exactly once, however often it is called (a compare-and-swap on the
// slot), so every ending of a response may call it. A count never goes
// negative: it is decremented only by the release that won that swap.
//
// # Reload
//
// Tracker.Apply puts a new set of backends in force. A backend that stays
// keeps its count (its requests are still in flight) and takes the new
// maxInFlight at once; a removed backend's outstanding slots still release
// into its old count, which no longer matters. Pollers are restarted only
// for backends whose saturation settings changed.
//
// # Waking waiters
//
// Options.OnRoom is called when a backend that refused, or was full, gets
// room: a release at maxInFlight, a release after a refusal, a saturation
// signal falling back under its max or going stale, a larger maxInFlight,
// the backend's removal from the config.
// It is called synchronously on the releasing goroutine and must not block
// (a non-blocking send on a channel of one, for example) and must not call
// Apply or Close, which wait for the pollers. The receiver
// should grant waiters one at a time until an Acquire is refused.
//
// # Fleet-wide counts
//
// With Options.Shared (package redisslots), a slot is also a lease in the
// store shared by the fleet, so maxInFlight holds for all replicas
// together; the local count still bounds each replica and gives the fast
// refusal.
package capacity
