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

// Package redisstore is a limiter.Store keeping token buckets in Redis, so
// every data-plane replica of a policy charges the same buckets and a limit
// holds for the whole fleet (spec.store.type Redis).
//
// # One script per batch
//
// All buckets of one limiter.Batch (the identity dimensions of a request:
// api key, user, team, model; or their four token dimensions, charged the
// request's token cost) are checked and charged by one Lua script in one
// EVALSHA round trip, falling back to EVAL when Redis has lost its
// script cache. Redis runs a script without interleaving other commands, so
// the charge is all or none across replicas. The script reads Redis's own
// clock (TIME), so replicas' clock skew does not matter, and does the memory
// store's GCRA arithmetic to the nanosecond (see bucketScript); the caller
// turns the debts it returns into a limiter.Decision with
// limiter.DecisionFromDebts, so Retry-After and the x-ratelimit-* quota are
// those of the memory store. Settling token buckets (Adjust: a signed cost
// per bucket, charging into bounded debt or refunding up to full) is the same
// script, one round trip and atomic across the batch.
//
// # Keys
//
// A bucket is the string key "fq:{<namespace>/<policy>}:<dimension>:<key>"
// (a token dimension has its own name, e.g. "user_tokens", so a user's token
// bucket sits beside their request bucket)
// whose value is "<s> <ns> <interval> <window>", the bucket's theoretical
// arrival time being s seconds plus ns nanoseconds (ns may exceed a second,
// so that a charge usually rewrites only ns). The
// braces are a Redis Cluster hash tag: every key of a policy hashes to one
// slot, so every script touches one slot, as Redis Cluster requires. A key
// expires when its bucket is full again (a full bucket and an absent one are
// the same), so idle identities cost nothing.
//
// # Failure
//
// A call that fails (no answer within the timeout, or any error reply: the
// charge was not applied) fails alone: with FailClosed it returns
// limiter.ErrStoreUnavailable (the server answers 503 store_unavailable,
// never queued); with FailOpen it is decided by an in-memory store holding
// each limit divided by the live replicas (Replicas), which lives as long as
// the Store and is charged with every admission Redis grants, so no
// capacity is granted on both paths. A run of consecutive failures
// (failureRun, health.go) marks the store down: calls are then answered so
// without contacting Redis, and one probe goroutine runs the bucket script
// as a real charge every ProbeInterval and returns the store to Redis once
// it applies it. Check does the same when a data plane puts the store in
// force. The transition is logged once each way and reported to the
// Observer; Health names the cause for readiness.
//
// Switch holds the store a data plane's loaded config selects, memory or
// Redis, and changes it on reload.
package redisstore
