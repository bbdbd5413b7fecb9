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
// strictly by priority band when there are bands, whatever the load
// balancer does.
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
// # Priority bands
//
// With priority bands (fairqueue.Weights.Bands, SPEC 5) a claimant is a
// tenant in a band: the tenant's own band, or a lower one its requests
// asked for (fairqueue.Request.Band; admission.BandGate). A tenant whose
// batch requests lowered themselves claims twice, and has a gate per band,
// so its lowered requests never take a turn of its own band. Reports carry
// each claimant's band and the replica's minShares m_b, and every replica
// computes, for bands b = 0 (the highest) to B−1 (Banded):
//
//   - D_b, the band's demand: unbounded when any claimant in it is
//     backlogged, else the sum of their demands;
//   - r_b = min(D_b, m_b·C), what band b keeps back from the bands above,
//     and R_b = Σ_{c>b} r_c, what the bands below b keep back from it;
//   - L_0 = C; band b divides L_b − R_b among its claimants by weighted
//     max-min (MaxMin), receiving A_b = min(D_b, L_b − R_b); L_{b+1} = L_b − A_b.
//
// Strict priority: with every m_b = 0, A_b = min(D_b, C − Σ_{c<b} A_c): a
// band gets only what the bands above leave. Floor: A_b ≥ r_b. Since the
// minShares sum below 1, L_0 = C ≥ Σ_c r_c; if L_b ≥ Σ_{c≥b} r_c then
// A_b ≥ min(D_b, r_b) = r_b (as L_b − R_b ≥ r_b) and L_{b+1} ≥ L_b − (L_b −
// R_b) = Σ_{c>b} r_c, so by induction every band gets at least min(D_b,
// m_b·C), taken from the bands above it. Work conservation: when a band b
// is backlogged it takes L_b − R_b, leaving exactly R_b, and every band c
// below then gets r_c (A_c = min(D_c, r_c)), so Σ_b A_b = C as without
// bands. Within a band the allocation is the max-min one above, so with a
// single band (no bands configured) it is exactly MaxMin.
//
// A claimant allocated nothing (its band starved, m_b = 0) has a closed gate
// instead of one at minRate: closed gates pass nothing, so the starved band
// admits nothing, where minRate would let every starved gate leak 1/s per
// replica past strict priority. A claimant new since the last round has an
// open gate until its replica's next round, like any tenant: at most one
// period of its arrivals, and the shared bucket still caps the total.
// When the higher bands' demand falls, a closed band reopens at the first
// round that sees it, within 2P.
//
// The wire format is unchanged without bands: a report carries band
// fields only when its replica has bands (BandShares), and omits band 0.
// Version skew, as in a rolling upgrade: a replica that predates bands, or
// has none configured, ignores the others' band fields (encoding/json skips
// unknown fields) and plans exactly as before bands; a replica with bands
// places the tenants of a report without BandShares in the bands of its
// own configuration, so its plan is the one it would compute had that
// replica known them. While both kinds of replica pace one key the gates no
// longer agree, so the bands hold only approximately, but the shared bucket
// still holds the fleet to C: in the simulation, with one old replica of
// three pacing the batch tenants there to their share without bands, a
// flooding interactive tenant got 67.5/s of its 90/s allocation (61.7/s of
// 72/s with a batch minShare of 0.2), against 22.5/s without bands. The band
// table (the minShares) is the one of the report with the smallest replica
// name, so the replicas agree on it while a reload reaches them one by one.
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
// than one interval (CPU starvation, a slow Redis call). The tolerance is at
// least J = 25 ms (gateJitter), so a gate above 1/J = 40/s, which has less
// than 25 ms between turns, passes at most g·τ + 1 + g·J: one interval
// would lose capacity to every scheduling delay of a busy replica. The
// bucket (burst at least 2 per gate) then never refuses a paced attempt. So
// over a window τ the admissions N_T of a backlogged tenant (a claimant,
// with bands) on R_T replicas satisfy
//
//	|N_T − a_T·τ| ≤ R_T·(1 + max(1, g·J)) + (requests delayed more than the tolerance)
//
// and its share of the fleet deviates from a_T/C by at most about
// 2·R_T/(C·τ) plus the lost fraction: on the reference scenario, 6 requests
// in 8 s at 90/s, under 1%. With bands a band's admissions are the sum of
// its claimants', so it receives A_b·τ, and in particular at least
// min(D_b, m_b·C)·τ, up to the sum of its claimants' errors: the
// interactive tenant of the scenario, alone in its band on one
// replica at 90/s, is within 1 + 90·0.025 ≈ 3 requests of its allocation
// over any window, and the batch band's minShare holds to within the
// 2·R errors of its claimants. A tenant below its fair share gets everything it
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
