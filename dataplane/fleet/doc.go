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

// Package fleet makes N data-plane replicas that share one Redis bucket
// divide it among tenants by weighted max-min fairness of the whole fleet,
// whatever the load balancer does.
//
// # The problem
//
// With the limiter's buckets in Redis a limit is fleet-wide, but each
// replica's fair queue only orders its own waiters. Which tenant gets a freed
// token depends on which replica retries first, so a tenant pinned to one
// replica competes only with that replica's other tenants. In the reference
// scenario (a shared model limit of 90/s, tenant A only on replica 1, B only
// on replica 2, C spread over three, weights 1:1:3) the replicas win about a
// third of the tokens each, and A and B get 0.08 of the fleet instead of 0.2.
//
// # Design: demand exchange and local pacing
//
// Two designs were weighed. (a) A shared virtual clock per key in Redis: a
// replica grants tenant T only while T's virtual finish tag is within a slack
// of the fleet's minimum, each grant advancing T's tag atomically with the
// bucket charge. It bounds lag per grant, but every admission pays Redis for
// the scheduling state, and the tag bookkeeping must live in the bucket's
// script. (b) Demand exchange in the style of Google's Doorman: replicas
// publish per-tenant demand every period, each computes the fleet's weighted
// max-min allocation and paces its own grants to its part of it. It costs the
// request path nothing beyond a local mutex and keeps this package separate
// from the bucket script. This package implements (b).
//
// Only model limits are divided: they are the one identity limit that
// several tenants share (an api key, user or team bucket belongs to one
// identity), and the pre-authentication limits are never queued.
//
// Every period P (DefaultPeriod, 200 ms) each replica r publishes, for every
// model key K it saw, one Report: per tenant T its weight w_T, its arrival
// rate d_{r,T} (an EWMA), whether a request of T was held back during the
// period (by the gate or by the shared bucket: "backlogged"), and its
// admission rate. Reports live in Redis for a TTL (3P) measured by Redis's
// own clock, so a replica that dies stops counting after it and a replica
// that shuts down withdraws at once. From the live reports every replica
// computes the same allocation, given the capacity C of K (its model limit):
//
//   - T's fleet demand D_T is unbounded when any replica reports it
//     backlogged, else the sum of its arrival rates;
//   - the allocation a_T is weighted max-min (water filling, MaxMin): with λ
//     the water level, a_T = min(D_T, w_T·λ) and, when any tenant is
//     backlogged, Σ_T a_T = C;
//   - a_T is split over the replicas hosting T: a replica where T is not
//     backlogged gets the demand it reported, those where it is split the rest
//     evenly (one that needs less stops being backlogged and hands the
//     difference back at the next round).
//
// Replica r then paces T with a gate (GCRA, Pacer.Allow) of rate
// g_{r,T} = h·s_{r,T}, where s_{r,T} is its part of a_T and h the headroom.
// Only tenants at the water level are paced: a tenant whose whole demand fits
// under its fair share has an open gate. A key whose fleet demand fits in C
// is not contended and all its gates are open. The admission controller
// consults the gate (admission.Gate) before every check of the bucket; a held
// request waits in its replica's fair queue exactly as if the bucket had
// refused it, so waiters never leave their replica's process and only
// scheduling state is shared. The shared bucket stays the hard limit: the
// gates only divide it.
//
// # Fairness bound
//
// Consider an interval over which demands do not change. A change is
// counted in the period it happens, published at the end of it, and read by
// every replica at its next round: the allocation reflects it within 2P
// (plus one Redis round trip).
//
// From then on, with h = 1 (DefaultHeadroom), Σ_{r,T} g_{r,T} = C: the gates
// together ask exactly the bucket's rate. A GCRA gate of rate g with a
// tolerance of one interval passes at most g·τ + 2 requests in any window τ,
// and a backlogged tenant's waiters retry as soon as the gate lets them, so
// it passes at least g·τ − 1 minus whatever its replica lost to delays longer
// than one interval (CPU starvation, a slow Redis call). The bucket (burst at
// least 2 per gate) then never refuses a paced attempt. So over a window τ
// the admissions N_T of a backlogged tenant on R_T replicas satisfy
//
//	|N_T − a_T·τ| ≤ 2·R_T + (requests delayed more than one interval)
//
// and its share of the fleet deviates from a_T/C by at most about
// 2·R_T/(C·τ) plus the lost fraction: on the reference scenario, 6 requests
// in 8 s at 90/s, under 1%. A tenant below its fair share gets everything it
// asks for, fleet-wide, since its gate is open; if it grows faster than its
// last report it takes at most one period's growth from the paced tenants
// before the next round paces it.
//
// Headroom h > 1 makes the gates ask more than C, so the bucket binds and
// refuses the excess (h−1)·C per second. Those refusals are not spread in
// proportion to the shares (whoever retries at the wrong moment loses), so a
// tenant's rate is only bounded below by h·a_T − (h−1)·C. h = 1 keeps
// shares exact and pays with capacity lost to delays beyond the gates'
// tolerance and to transitions.
//
// Transitions: a replica shutting down keeps exchanging while it still
// admits (its shutdown delay, with its real, decaying demand) and withdraws
// when it stops; its tenants' allocation then moves to the others within one
// round; when it dies it moves after the TTL (3P). Meanwhile up to its part of C per second is unused: in
// the simulation a 3 → 2 scale-down without a goodbye dropped the first
// second to 77/s and the following 15 s averaged 89.1/s.
//
// Failure: while the buckets are per replica (the memory store in force)
// the exchange answers ErrNotShared and every gate stays open. When the
// exchange is unreachable a replica keeps its last gates for the TTL, then
// opens them: fairness falls back to each replica's own fair queue, while
// the shared bucket still holds the fleet to C (or, if the bucket's store is
// down too, the store's failure mode decides).
//
// Membership: every round each replica also publishes a report under
// MembersKey, with no tenants and its hash key's fingerprint. The live
// membership reports count the replicas (Pacer.Live, what a store failing
// open divides its limits by) and show replicas that hash identities with
// different keys, which would split each tenant into one tenant per key
// (Pacer.KeyHealth, after a rotation's grace).
//
// Positions and estimates stay meaningful fleet-wide in this sense: the fair
// queue's estimate is measured from the replica's own grant spacing, which
// under pacing is the tenant's paced fleet share on that replica; the
// position is the request's place in its replica's order, not a fleet-wide
// rank.
package fleet
