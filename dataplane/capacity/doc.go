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
// into its old count, which a reload bringing the backend back before they
// end takes up again, so its maxInFlight counts them. Pollers are restarted
// only for backends whose saturation settings changed. Tracker.ApplyPool
// also names the pool's backends, with a capacity entry or without: every
// request's candidates are the pool in force when it tries for a slot, so a
// request that waited through a reload goes to the backends the reload put
// in force (a backend new to the pool wakes the waiters), never to one it
// removed.
//
// # Window
//
// A saturation signal is read every interval and cannot see the requests
// dispatched since. Blocking every request from a reading over a max until
// the next reading under it wastes the slots that free meanwhile (a light
// tenant's request then waits for a reading, not for a slot), and letting
// every waiter through when the reading clears fills the server's own
// queue before the next reading can see them. So once a reading has said
// saturated, a backend keeps a window, an in-flight bound below
// maxInFlight learned from its readings, and a release under it admits the
// next waiter at once, like a slot under maxInFlight:
//
//   - a reading over a max cuts the window to what was in flight at the
//     last reading under every max (what the server took), and at least one
//     below what is in flight now, so the server's own queue drains as
//     requests end; with nothing in flight there is nothing to hold back,
//     and the backend refuses outright until a reading clears;
//   - a reading under every max grows it to one above what is in flight
//     (the reading says the server took that many), or by one, and drops
//     it at maxInFlight: additive increase, since a request sent is seen
//     by the next reading at the earliest;
//   - stale signals drop it: maxInFlight alone decides. A failed poll
//     before then changes nothing.
//
// The window lives on the backend, not in the Acquire fast path's
// decisions: Acquire compares the count with the smaller of maxInFlight and
// the window. docs/capacity.md has the measurements behind these choices.
//
// # Overdraft
//
// Under a flood every slot under the window is held, and a request of a
// light tenant, granted first by the fair queue, still waits for the next
// release. So AcquireFor takes a slot at once, above the window, for a
// Claim whose tenant holds less than its weighted share of the backend's
// slots (among the tenants holding slots there or waiting for one, itself
// included; by Claim.Cost, so with cost: Tokens a tenant of short prompts
// holding many slots is still under its share of the tokens) or whose band
// is above some holder's band:
//
//   - at most max(MinOverdraft, window/OverdraftDivisor) slots above the
//     window at once, never above maxInFlight; the overdraft is repaid by
//     the next releases, which admit no one while the count is at or over
//     the window. maxInFlight alone (no window) and a signal over its max
//     with nothing in flight allow none. The window's growth leaves out
//     the overdraft outstanding (taken and not yet repaid by a release):
//     it is not the server taking more. Its cut counts it;
//   - never past a higher band's waiter: while a request of a higher band
//     waits (Tracker.Waiting), no lower band overdrafts;
//   - per-tenant counts are per backend with signals (without, there is
//     no window and the fast path stays a compare-and-swap) and bounded
//     (Options.MaxTenants, then the policy's maxTenants given to Apply); an
//     entry leaves when its count returns to 0, and a tenant that could not
//     be counted never overdrafts. The weights a share is weighed among are
//     running sums kept as entries come and go, so a refused acquire does
//     not scan the tenants.
//
// The window, the shares and the reserve are this replica's: learned from
// its own count, they bound its own count. With Options.Shared the store
// is asked for maxInFlight alone (see Fleet-wide counts).
//
// # Waking waiters
//
// Options.OnRoom is called when a backend that refused, or was full, gets
// room: a release at maxInFlight, a release after a refusal, a saturation
// signal falling back under its max or going stale, a window that grew, a
// larger maxInFlight, the backend's removal from the config.
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
// refusal. The store is asked for maxInFlight, never the window: a window
// is in this replica's units (what it had in flight when the server's
// signals were under their max), and compared with the fleet's count it
// refused the replica outright after every cut until its readings grew it
// past the other replicas' requests. Each replica reads the same signals
// and keeps its own window, so a reading over a max cuts every replica's
// count, and readings under every max grow the fleet's by one per replica.
// A Shared that implements FleetRoom tells the Tracker of slots freed on
// other replicas, which wakes waiters here as a local release does.
package capacity
