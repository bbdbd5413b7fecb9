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

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/fakeupstream"
)

// The AI SDK and LangChain, like openai-node, are judged by what they do
// with the data plane's answers when they obey them literally: the usage
// they report, and how soon and how often they retry a 429.

// nodeClients returns node and the node_modules holding the AI SDK and
// LangChain (NODE_CLIENTS_MODULES, which `make test` installs into bin/).
func nodeClients(t *testing.T) (node, modules string) {
	t.Helper()
	return nodeModules(t, "NODE_CLIENTS_MODULES", "node-clients",
		"ai", "@ai-sdk/openai-compatible", "@langchain/openai", "@langchain/core")
}

// clientPrelude is shared by the client scripts: logged() returns a fetch
// that records every attempt a client makes (when, what it asked, the
// status and the headers it was told), and observe() runs one call and
// reports its outcome, its error as describe() renders it, and its
// attempts. The scripts print one JSON document.
const clientPrelude = `
const t0 = Date.now();
function logged() {
  const list = [];
  const f = async (url, init) => {
    const at = Date.now() - t0;
    const a = { at };
    try {
      const b = JSON.parse(init.body);
      a.stream = !!b.stream;
      a.includeUsage = !!(b.stream_options && b.stream_options.include_usage);
    } catch (e) {}
    const r = await fetch(url, init);
    a.status = r.status;
    a.retryAfterMs = r.headers.get('retry-after-ms');
    a.retryAfter = r.headers.get('retry-after');
    a.waitMs = r.headers.get('x-fair-queue-wait-ms');
    if (r.status === 429) {
      const e = await r.clone().json();
      a.limitType = e.error && e.error.details && e.error.details.limit_type;
    }
    list.push(a);
    return r;
  };
  return { list, fetch: f };
}
async function observe(log, fn) {
  const start = Date.now();
  const out = {};
  try {
    Object.assign(out, await fn());
    out.outcome = 'ok';
    if (out.text.length > 100) {
      out.chars = out.text.length;
      delete out.text;
    }
  } catch (e) {
    out.outcome = 'error';
    out.error = describe(e);
  }
  out.ms = Date.now() - start;
  out.attempts = log.list;
  return out;
}
const base = process.env.BASE_URL;
const shortBase = process.env.SHORT_BASE_URL;
const longBase = process.env.LONG_BASE_URL;
const prompt = process.env.PROMPT;
// alice holds the one slot of the capacity policy (through no client: the
// refused request is the client's).
const asAlice = () => fetch(base + '/chat/completions', { method: 'POST',
  body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
  headers: { 'content-type': 'application/json', 'x-user': 'alice' } });
async function capacity(call) {
  const warm = await asAlice();
  await warm.text();
  // Two users through the client at once: one takes the slot, the other
  // waits in the fair queue for it.
  const queued = await Promise.all(['carol', 'dave'].map((u) => call({ 'x-user': u })));
  const hold = asAlice();
  // Until alice's request holds the slot at the upstream (bounded: the
  // script's own limit ends it otherwise).
  while ((await (await fetch(process.env.IN_FLIGHT_URL)).text()) !== '1') {
    await new Promise((r) => setTimeout(r, 10));
  }
  const refused = await call({});
  const h = await hold;
  await h.text();
  return { warm: warm.status, hold: h.status, queued, refused };
}
async function main(tokens, capacityCall) {
  const out = process.env.SCENARIO === 'capacity' ? await capacity(capacityCall) : await tokens();
  console.log(JSON.stringify(out));
}
`

// aiSDKScript drives the data plane with the AI SDK (generateText and
// streamText) through @ai-sdk/openai-compatible, with the SDK's default
// retries (2).
const aiSDKScript = clientPrelude + `
const { generateText, streamText } = require('ai');
const { createOpenAICompatible } = require('@ai-sdk/openai-compatible');
function describe(e) {
  const last = e.lastError || e;
  let body = {};
  try { body = JSON.parse(last.responseBody).error || {}; } catch (x) {}
  return { name: e.name, reason: e.reason, tries: e.errors ? e.errors.length : 1, status: last.statusCode,
    retryable: last.isRetryable, code: body.code, limitType: body.details && body.details.limit_type,
    message: e.message };
}
function model(log, opts) {
  return createOpenAICompatible({ name: 'fq', baseURL: base, apiKey: 'sk-ai-sdk', fetch: log.fetch, ...opts }).chatModel('m');
}
const usage = (u) => u && { input: u.inputTokens, output: u.outputTokens, total: u.totalTokens };
async function generate(opts, maxOutputTokens) {
  const log = logged();
  return observe(log, async () => {
    const r = await generateText({ model: model(log, opts), prompt, maxOutputTokens });
    return { text: r.text, usage: usage(r.usage) };
  });
}
async function stream(opts) {
  const log = logged();
  return observe(log, async () => {
    let streamError = null;
    const r = streamText({ model: model(log, opts), prompt, maxOutputTokens: 20, onError: ({ error }) => { streamError = error; } });
    let text = '';
    for await (const d of r.textStream) text += d;
    if (streamError) throw streamError;
    return { text, usage: usage(await r.usage) };
  });
}
main(async () => ({
  json: await generate({}, 20),
  stream: await stream({}),
  usageStream: await stream({ includeUsage: true }),
  spend: await generate({ baseURL: shortBase }, 20),
  overBudget: await generate({ baseURL: shortBase }, 20),
  first: await generate({ baseURL: longBase }, 20),
  long: await generate({ baseURL: longBase }, 20),
}), async (headers) => generate({ headers }, 20)).catch((e) => { console.error(e); process.exit(1); });
`

// langChainScript drives the data plane with LangChain's ChatOpenAI
// (invoke and stream), with its default retries (6, its AsyncCaller's).
const langChainScript = clientPrelude + `
const { ChatOpenAI } = require('@langchain/openai');
function describe(e) {
  const body = e.error || {};
  return { name: e.name, status: e.status, code: body.code || e.code, lcCode: e.lc_error_code,
    limitType: body.details && body.details.limit_type, rateLimitType: e.rateLimitType,
    retryAfterMs: e.retryAfterMs, message: e.message };
}
function model(log, opts, headers) {
  const { baseURL, ...rest } = opts;
  return new ChatOpenAI({ model: 'm', apiKey: 'sk-langchain', maxTokens: 20, ...rest,
    configuration: { baseURL: baseURL || base, fetch: log.fetch, defaultHeaders: headers } });
}
const usage = (u) => u && { input: u.input_tokens, output: u.output_tokens, total: u.total_tokens };
async function invoke(opts, headers) {
  const log = logged();
  return observe(log, async () => {
    const m = await model(log, opts, headers).invoke(prompt);
    return { text: m.content, usage: usage(m.usage_metadata) };
  });
}
async function stream(opts) {
  const log = logged();
  return observe(log, async () => {
    let all = null;
    for await (const c of await model(log, opts).stream(prompt)) all = all ? all.concat(c) : c;
    return { text: all.content, usage: usage(all.usage_metadata) };
  });
}
main(async () => ({
  json: await invoke({}),
  stream: await stream({ streamUsage: false }),
  usageStream: await stream({}),
  spend: await invoke({ baseURL: shortBase }),
  overBudget: await invoke({ baseURL: shortBase }),
  first: await invoke({ baseURL: longBase }),
  long: await invoke({ baseURL: longBase }),
}), async (headers) => invoke({}, headers)).catch((e) => { console.error(e); process.exit(1); });
`

// shortPolicy is a per-model budget of 30 tokens in 10s: after one call of
// 27 tokens the next, reserving 34 (its prompt estimate and max_tokens 20),
// is refused for some seconds (told 5.6s in a run), which both clients wait
// out. Unlike a request over a large budget, its refusal does not hang on
// how fast the calls before it ran.
const shortPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: short, namespace: default}
spec:
  backends: [{name: up, url: "http://upstream.invalid:8000"}]
  deferredAdmission:
    enabled: true
    tokenLimits:
      perModel: {tokens: 30, period: 10s}
    bounds: {maxWait: 1s}
`

// hourPolicy is a per-model budget of 30 tokens an hour: after one call of
// 27 tokens the next is refused for over half an hour (told about 2040s),
// past the 60s up to which both clients obey a Retry-After.
const hourPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: hour, namespace: default}
spec:
  backends: [{name: up, url: "http://upstream.invalid:8000"}]
  deferredAdmission:
    enabled: true
    tokenLimits:
      perModel: {tokens: 30, period: 1h}
    bounds: {maxWait: 1s}
`

// clientAttempt is one request a client sent, as its fetch saw it.
type clientAttempt struct {
	At           int64  `json:"at"`
	Stream       bool   `json:"stream"`
	IncludeUsage bool   `json:"includeUsage"`
	Status       int    `json:"status"`
	RetryAfterMs string `json:"retryAfterMs"`
	RetryAfter   string `json:"retryAfter"`
	WaitMs       string `json:"waitMs"`
	LimitType    string `json:"limitType"`
}

// told returns the retry-after-ms and Retry-After of a, or fails.
func (a clientAttempt) told(t *testing.T) (ms, s time.Duration) {
	t.Helper()
	m, err1 := strconv.Atoi(a.RetryAfterMs)
	sec, err2 := strconv.Atoi(a.RetryAfter)
	if err1 != nil || err2 != nil {
		t.Fatalf("attempt %+v: want retry-after-ms and Retry-After in whole seconds", a)
	}
	return time.Duration(m) * time.Millisecond, time.Duration(sec) * time.Second
}

// clientUsage is token usage as a client reports it.
type clientUsage struct {
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
	Total  int64 `json:"total"`
}

// clientCall is one call of a client: what it returned or threw, and the
// attempts it made.
type clientCall struct {
	Outcome  string          `json:"outcome"`
	Text     string          `json:"text"`
	Usage    *clientUsage    `json:"usage"`
	Error    map[string]any  `json:"error"`
	MS       int64           `json:"ms"`
	Attempts []clientAttempt `json:"attempts"`
}

// gaps returns the time between the starts of successive attempts.
func (c clientCall) gaps() []time.Duration {
	var d []time.Duration
	for i := 1; i < len(c.Attempts); i++ {
		d = append(d, time.Duration(c.Attempts[i].At-c.Attempts[i-1].At)*time.Millisecond)
	}
	return d
}

type tokenRun struct {
	JSON        clientCall `json:"json"`
	Stream      clientCall `json:"stream"`
	UsageStream clientCall `json:"usageStream"`
	Spend       clientCall `json:"spend"`
	OverBudget  clientCall `json:"overBudget"`
	First       clientCall `json:"first"`
	Long        clientCall `json:"long"`
}

type capacityRun struct {
	Warm    int          `json:"warm"`
	Hold    int          `json:"hold"`
	Queued  []clientCall `json:"queued"`
	Refused clientCall   `json:"refused"`
}

// clientPrompt is what each call asks; the fake upstream counts it as
// CountTokens(clientPrompt) prompt tokens.
const clientPrompt = "Tell me about fair queuing."

// clientAnswer is the fake upstream's answer of 10 tokens, half of the
// max_tokens 20 each call asks for.
const clientAnswer = "fair queue share token time every tenant gets its weight"

// runClientTokens runs script's token scenario against tokenPolicy,
// shortPolicy and hourPolicy in front of a fake upstream answering half of max_tokens.
func runClientTokens(t *testing.T, script string) tokenRun {
	t.Helper()
	node, modules := nodeClients(t)
	fake := fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.5, Record: 32})
	up := httptest.NewServer(fake)
	defer up.Close()
	dir := t.TempDir()
	traffic := startPolicy(t, dir, "policy", tokenPolicy, up.URL)
	short := startPolicy(t, dir, "short", shortPolicy, up.URL)
	hour := startPolicy(t, dir, "hour", hourPolicy, up.URL)
	out := runNode(t, node, modules, script, 2*time.Minute, "BASE_URL=http://"+traffic+"/v1",
		"SHORT_BASE_URL=http://"+short+"/v1", "LONG_BASE_URL=http://"+hour+"/v1", "PROMPT="+clientPrompt, "SCENARIO=tokens")
	t.Logf("client saw: %s", out)
	var got tokenRun
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	// Whatever the client asked, the data plane asks upstream for a
	// stream's usage (it counts the tokens): a client that did not ask and
	// reports none had the usage chunk stripped, not never sent.
	streams := 0
	for _, r := range fake.Requests() {
		var body struct {
			Stream        bool `json:"stream"`
			StreamOptions struct {
				IncludeUsage bool `json:"include_usage"`
			} `json:"stream_options"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil || !body.Stream {
			continue
		}
		streams++
		if !body.StreamOptions.IncludeUsage {
			t.Errorf("the upstream got a stream without include_usage: %s", r.Body)
		}
	}
	if streams != 2 {
		t.Errorf("the upstream got %d streams, want the client's 2", streams)
	}
	return got
}

// checkCompletions asserts the text and usage a client reports for a JSON
// completion, a stream it asked no usage for (the data plane asks upstream
// and strips the usage chunk, so the client reports none rather than a
// usage it did not ask for) and one it asked usage for (the upstream's).
func checkCompletions(t *testing.T, got tokenRun) {
	t.Helper()
	want := clientUsage{Input: fakeupstream.CountTokens(clientPrompt), Output: 10}
	want.Total = want.Input + want.Output
	for _, c := range []struct {
		name      string
		call      clientCall
		askUsage  bool
		wantUsage bool
	}{
		{"JSON completion", got.JSON, false, true},
		{"stream without usage asked", got.Stream, false, false},
		{"stream with usage asked", got.UsageStream, true, true},
	} {
		if c.call.Outcome != "ok" || c.call.Text != clientAnswer || len(c.call.Attempts) != 1 {
			t.Errorf("%s: %s, text %q after %d attempts (%v), want %q in one", c.name, c.call.Outcome,
				c.call.Text, len(c.call.Attempts), c.call.Error, clientAnswer)
			continue
		}
		if a := c.call.Attempts[0]; a.Stream != (c.name != "JSON completion") || a.IncludeUsage != c.askUsage {
			t.Errorf("%s: the client sent stream %v include_usage %v, want %v", c.name, a.Stream, a.IncludeUsage, c.askUsage)
		}
		switch u := c.call.Usage; {
		case c.wantUsage && (u == nil || *u != want):
			t.Errorf("%s: the client reports usage %+v, want the upstream's %+v", c.name, u, want)
		case !c.wantUsage && u != nil && *u != (clientUsage{}):
			t.Errorf("%s: the client reports usage %+v it did not ask for (the injected usage chunk must be stripped)", c.name, *u)
		}
	}
}

// checkObeyed asserts that call, refused first with limitType, succeeded
// and that no retry came sooner than told: the delay the client honours
// (retry-after-ms, or Retry-After) of the refusal before it.
func checkObeyed(t *testing.T, name string, call clientCall, limitType string, honoured func(ms, s time.Duration) time.Duration) {
	t.Helper()
	if len(call.Attempts) < 2 || call.Attempts[0].Status != 429 || call.Attempts[0].LimitType != limitType {
		t.Fatalf("%s: attempts %+v, want a 429 limit_type %s first and a retry", name, call.Attempts, limitType)
	}
	if call.Outcome != "ok" {
		t.Errorf("%s: %s %v after %d attempts, want success once told when to come back", name, call.Outcome, call.Error, len(call.Attempts))
	}
	for i, gap := range call.gaps() {
		ms, s := call.Attempts[i].told(t)
		t.Logf("%s: refused, told retry-after-ms %v, Retry-After %v; the client came back %v later", name, ms, s, gap)
		if want := honoured(ms, s); gap < want {
			t.Errorf("%s: retry %d came %v after a refusal telling retry-after-ms %v (Retry-After %v), want at least %v",
				name, i+1, gap, ms, s, want)
		}
	}
}

// runClientCapacity runs script's capacity scenario against capacityPolicy
// in front of a fake upstream taking latency per request.
func runClientCapacity(t *testing.T, script string, latency time.Duration) capacityRun {
	t.Helper()
	node, modules := nodeClients(t)
	fake := fakeupstream.New(fakeupstream.Options{Latency: latency})
	up := httptest.NewServer(fake)
	defer up.Close()
	// The script asks how many requests the upstream holds, to send its
	// refused request once alice's holds the slot, not after a guess.
	inFlight := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprint(w, fake.InFlight())
	}))
	defer inFlight.Close()
	traffic := startPolicy(t, t.TempDir(), "cap", capacityPolicy, up.URL)
	out := runNode(t, node, modules, script, 2*time.Minute,
		"BASE_URL=http://"+traffic+"/v1", "PROMPT="+clientPrompt, "SCENARIO=capacity", "IN_FLIGHT_URL="+inFlight.URL)
	t.Logf("client saw: %s", out)
	var got capacityRun
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	return got
}

// checkCapacity asserts that two users asking the one slot at once both
// succeed in one attempt, one having waited in the fair queue, and that a
// request without identity, refused while the slot is held, is told at
// least the slot's time and succeeds when the client comes back as told.
func checkCapacity(t *testing.T, got capacityRun, latency time.Duration, honoured func(ms, s time.Duration) time.Duration) {
	t.Helper()
	if got.Warm != 200 || got.Hold != 200 || len(got.Queued) != 2 {
		t.Fatalf("alice's requests: %d and %d, %d queued calls; want 200, 200, 2", got.Warm, got.Hold, len(got.Queued))
	}
	waited := 0
	for i, c := range got.Queued {
		if c.Outcome != "ok" || len(c.Attempts) != 1 || c.Attempts[0].Status != 200 {
			t.Errorf("queued call %d: %s %v after attempts %+v, want one attempt answered 200", i, c.Outcome, c.Error, c.Attempts)
			continue
		}
		if ms, err := strconv.Atoi(c.Attempts[0].WaitMs); err == nil && ms > 0 {
			waited++
		}
	}
	if waited != 1 {
		t.Errorf("%d of the two calls for one slot carried x-fair-queue-wait-ms, want one (the one that waited)", waited)
	}
	checkObeyed(t, "refused without identity", got.Refused, "capacity", honoured)
	if ms, _ := got.Refused.Attempts[0].told(t); ms < latency {
		t.Errorf("capacity refusal told retry-after-ms %v, want at least the %v a slot is held", ms, latency)
	}
}

// aiSDKHonours is the delay the AI SDK waits after a 429: retry-after-ms,
// else Retry-After, when under 60s (ai's getRetryDelayInMs).
func aiSDKHonours(ms, _ time.Duration) time.Duration { return ms }

// langChainHonours is the delay LangChain waits after a 429: the larger of
// its backoff (at least 1s) and Retry-After (it does not read
// retry-after-ms), when Retry-After is under 60s (@langchain/core's
// AsyncCaller).
func langChainHonours(_, s time.Duration) time.Duration { return max(s, time.Second) }

// TestAISDKClientWithTokenBudgets runs the AI SDK (generateText, streamText
// through @ai-sdk/openai-compatible, default maxRetries 2) against token
// budgets: completions and their usage, a refusal it must wait out, and one
// for over half an hour, which it retries anyway.
func TestAISDKClientWithTokenBudgets(t *testing.T) {
	got := runClientTokens(t, aiSDKScript)
	checkCompletions(t, got)
	if got.Spend.Outcome != "ok" {
		t.Fatalf("first call on the 10s budget: %s %v, want ok", got.Spend.Outcome, got.Spend.Error)
	}
	checkObeyed(t, "over the budget", got.OverBudget, "model_tokens", aiSDKHonours)
	if got.First.Outcome != "ok" {
		t.Fatalf("first call on the hourly budget: %s %v, want ok", got.First.Outcome, got.First.Error)
	}
	// Told to come back in over half an hour, over the 60s it honours, the AI
	// SDK falls back to its backoff (2s, then 4s) and spends its retries on
	// refusals.
	long := got.Long
	t.Logf("refused for over half an hour: %d attempts, gaps %v, error %v", len(long.Attempts), long.gaps(), long.Error)
	if long.Outcome != "error" || len(long.Attempts) != 3 {
		t.Fatalf("refused for over half an hour: %s after %d attempts, want an error after 3", long.Outcome, len(long.Attempts))
	}
	for i, a := range long.Attempts {
		if ms, _ := a.told(t); a.Status != 429 || ms < time.Minute {
			t.Errorf("attempt %d: %d told %v, want 429 with more than a minute", i, a.Status, ms)
		}
	}
	for i, gap := range long.gaps() {
		if backoff := 2 * time.Second << i; gap < backoff {
			t.Errorf("retry %d came %v after the refusal, want the AI SDK's backoff %v", i+1, gap, backoff)
		}
	}
	if e := long.Error; e["name"] != "AI_RetryError" || e["reason"] != "maxRetriesExceeded" || e["status"] != 429.0 ||
		e["code"] != "model_tokens_rate_limit_exceeded" || e["limitType"] != "model_tokens" {
		t.Errorf("the AI SDK surfaced %v, want an AI_RetryError (maxRetriesExceeded) whose last error is the 429 model_tokens refusal", e)
	}
}

// TestAISDKClientInCapacityMode: with the AI SDK, two users asking one slot
// at once both succeed, one waiting in the fair queue, and a request without
// identity refused while the slot is held waits retry-after-ms and
// succeeds.
func TestAISDKClientInCapacityMode(t *testing.T) {
	checkCapacity(t, runClientCapacity(t, aiSDKScript, time.Second), time.Second, aiSDKHonours)
}

// TestLangChainClientWithTokenBudgets runs LangChain's ChatOpenAI (invoke,
// stream; default maxRetries 6) against token budgets: completions and
// their usage, a refusal it must wait out (it waits the whole-second
// Retry-After), and one for over half an hour, which it surfaces at once.
func TestLangChainClientWithTokenBudgets(t *testing.T) {
	got := runClientTokens(t, langChainScript)
	checkCompletions(t, got)
	if got.Spend.Outcome != "ok" {
		t.Fatalf("first call on the 10s budget: %s %v, want ok", got.Spend.Outcome, got.Spend.Error)
	}
	checkObeyed(t, "over the budget", got.OverBudget, "model_tokens", langChainHonours)
	if got.First.Outcome != "ok" {
		t.Fatalf("first call on the hourly budget: %s %v, want ok", got.First.Outcome, got.First.Error)
	}
	// Told to come back in more than 60s, LangChain does not retry: it
	// throws a RateLimitCapacityError carrying the time it was told.
	long := got.Long
	t.Logf("refused for over half an hour: %d attempts, error %v", len(long.Attempts), long.Error)
	if long.Outcome != "error" || len(long.Attempts) != 1 || long.Attempts[0].Status != 429 {
		t.Fatalf("refused for over half an hour: %s after attempts %+v, want an error after one 429", long.Outcome, long.Attempts)
	}
	ms, s := long.Attempts[0].told(t)
	if e := long.Error; e["name"] != "RateLimitCapacityError" || e["status"] != 429.0 || e["rateLimitType"] != "capacity" ||
		e["limitType"] != "model_tokens" || e["retryAfterMs"] != float64(s.Milliseconds()) {
		t.Errorf("LangChain surfaced %v, want a RateLimitCapacityError 429 model_tokens with retryAfterMs %d (told retry-after-ms %v)", e, s.Milliseconds(), ms)
	}
}

// TestLangChainClientInCapacityMode: as TestAISDKClientInCapacityMode with
// LangChain, which comes back after the whole-second Retry-After.
func TestLangChainClientInCapacityMode(t *testing.T) {
	checkCapacity(t, runClientCapacity(t, langChainScript, time.Second), time.Second, langChainHonours)
}
