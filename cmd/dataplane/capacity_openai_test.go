package main

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

// capacityPolicy is one backend of one slot, fair queuing by user; the
// client's Authorization header is no identity (only x-fq-key is an API
// key), so the openai client's requests are refused a slot at once.
const capacityPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: cap, namespace: default}
spec:
  identity: {apiKeyHeaders: [x-fq-key], userHeader: x-user, trustHeaders: true}
  backends: [{name: up, url: "http://upstream.invalid:8000"}]
  fairQueuing: {enabled: true, tenantDimension: user}
  capacity: {backends: [{name: up, maxInFlight: 1}]}
`

// capacityScript: user alice's first request takes the one slot and ends
// (the data plane has timed one); her second holds it again; DELAY_MS later
// openai-node, with its default retries, asks without an identity. It
// prints the outcome and every attempt the client made.
const capacityScript = `
const OpenAI = require('openai');
const base = process.env.BASE_URL;
const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
const asAlice = () => fetch(base + '/chat/completions', { method: 'POST', body,
  headers: { 'content-type': 'application/json', 'x-user': 'alice' } });
const t0 = Date.now();
const attempts = [];
const fetchLogging = async (url, init) => {
  const at = Date.now() - t0;
  const r = await fetch(url, init);
  const a = { at, status: r.status, retryAfterMs: r.headers.get('retry-after-ms') };
  if (r.status === 429) {
    const e = await r.clone().json();
    a.limitType = e.error && e.error.details && e.error.details.limit_type;
  }
  attempts.push(a);
  return r;
};
const client = new OpenAI({ baseURL: base, apiKey: 'sk-no-identity', fetch: fetchLogging });
(async () => {
  const warm = await asAlice();
  await warm.text();
  const hold = asAlice();
  await new Promise((r) => setTimeout(r, Number(process.env.DELAY_MS)));
  let outcome = 'ok';
  try {
    await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] });
  } catch (e) {
    outcome = 'error ' + e.status;
  }
  const h = await hold;
  await h.text();
  console.log(JSON.stringify({ warm: warm.status, hold: h.status, outcome, attempts }));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestOpenAINodeClientWaitsOutACapacityRefusal: the official openai npm
// client, with its default 2 retries, asks a backend of one slot held by
// another request (each held a second) and is refused at once, limit_type
// capacity, since it has no identity. It sleeps exactly the retry-after-ms
// it is told before retrying, so that must not be shorter than the slot
// takes to free: told the time the data plane measured a slot is held (the
// first request's), it comes back to a free slot and succeeds, rather than
// spending its retries 50ms apart as it did before (three 429s within
// 150ms).
//
// Before the first slot has been released nothing says when one will; the
// data plane then tells the time the slot has been held so far (at least
// 50ms), so a client retrying at once after a cold start sees its wait
// double with each refusal and may run out of retries first
// (TestCapacityRefusalRetryAfterFollowsTheSlot in dataplane/server covers
// what it is told).
func TestOpenAINodeClientWaitsOutACapacityRefusal(t *testing.T) {
	node, modules := openaiNode(t)
	const latency = time.Second
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{Latency: latency}))
	defer up.Close()
	base := "http://" + startPolicy(t, t.TempDir(), "cap", capacityPolicy, up.URL) + "/v1"
	out := runNode(t, node, modules, capacityScript, time.Minute, "BASE_URL="+base, "DELAY_MS=200")
	t.Logf("openai client saw: %s", out)
	var got struct {
		Warm, Hold int
		Outcome    string
		Attempts   []struct {
			At           int64
			Status       int
			RetryAfterMs string
			LimitType    string
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	if got.Warm != 200 || got.Hold != 200 {
		t.Fatalf("alice's requests: %d and %d, want 200", got.Warm, got.Hold)
	}
	if got.Outcome != "ok" {
		t.Errorf("the client without identity ended in %s after %d attempts, want success once the slot freed", got.Outcome, len(got.Attempts))
	}
	if len(got.Attempts) < 2 {
		t.Fatalf("the client made %d attempts, want a refusal first (the slot was held)", len(got.Attempts))
	}
	first := got.Attempts[0]
	told, err := strconv.Atoi(first.RetryAfterMs)
	if first.Status != 429 || first.LimitType != "capacity" || err != nil {
		t.Fatalf("first attempt: %+v, want 429 limit_type capacity with retry-after-ms", first)
	}
	// The slot held now was taken before the refusal and takes latency: it
	// frees within latency. A slot measured held at least latency says so.
	if time.Duration(told)*time.Millisecond < latency {
		t.Errorf("first refusal told retry-after-ms %d, want at least the %v a slot is held", told, latency)
	}
}
