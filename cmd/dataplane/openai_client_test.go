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
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/internal/fakeupstream"
	"github.com/fairqueue/fairqueue/internal/testbin"
)

// tokenPolicy is a standalone policy with a per-model token budget of 2000
// tokens a minute, holding requests for at most a second.
const tokenPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: llm, namespace: default}
spec:
  backends: [{name: up, url: "http://upstream.invalid:8000"}]
  deferredAdmission:
    enabled: true
    tokenLimits:
      perModel: {tokens: 2000, period: 1m}
    bounds: {maxWait: 1s}
`

// openaiScript drives the data plane with the official openai npm client:
// a JSON completion, a stream that did not ask for usage (the data plane
// asks upstream and must strip the usage chunk), a stream that did, and a
// request over the token budget. It prints one JSON document.
const openaiScript = `
const OpenAI = require('openai');
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: 'sk-client-test', maxRetries: 0 });
const messages = [{ role: 'user', content: 'Tell me about fair queuing.' }];
(async () => {
  const out = {};
  const r = await client.chat.completions.create({ model: 'm', max_tokens: 20, messages });
  out.json = { usage: r.usage, content: r.choices[0].message.content };
  let chunks = 0, usageChunks = 0, emptyChoices = 0;
  for await (const c of await client.chat.completions.create({ model: 'm', max_tokens: 20, messages, stream: true })) {
    chunks++;
    if (c.usage) usageChunks++;
    if (!c.choices || c.choices.length === 0) emptyChoices++;
  }
  out.plainStream = { chunks, usageChunks, emptyChoices };
  let last = null;
  for await (const c of await client.chat.completions.create({ model: 'm', max_tokens: 20, messages, stream: true, stream_options: { include_usage: true } })) {
    if (c.usage) last = c.usage;
  }
  out.usageStream = { usage: last };
  try {
    await client.chat.completions.create({ model: 'm', max_tokens: 5000, messages });
    out.overBudget = { status: 200 };
  } catch (e) {
    out.overBudget = {
      status: e.status, code: e.code, type: e.type,
      limitType: e.error && e.error.details && e.error.details.limit_type,
      retryAfterMs: e.headers && e.headers.get('retry-after-ms'),
      limitTokens: e.headers && e.headers.get('x-ratelimit-limit-tokens'),
      name: e.constructor.name,
    };
  }
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
`

// openaiNode returns node and the directory holding the openai npm package
// (OPENAI_NODE_MODULES, which `make test` installs into bin/), skipping the
// test when it is not set.
func openaiNode(t *testing.T) (node, modules string) {
	t.Helper()
	return nodeModules(t, "OPENAI_NODE_MODULES", "openai-node", "openai")
}

// nodeModules returns node and the node_modules directory named by the
// environment variable env, which `make test` sets after installing pkgs
// there with the make target, skipping the test when env is not set (plain
// `go test`).
func nodeModules(t *testing.T, env, target string, pkgs ...string) (node, modules string) {
	t.Helper()
	modules = os.Getenv(env)
	if modules == "" {
		t.Skipf("%s is not set; `make test` installs the npm packages %v and sets it", env, pkgs)
	}
	for _, pkg := range pkgs {
		if _, err := os.Stat(filepath.Join(modules, pkg)); err != nil {
			t.Fatalf("%s=%s has no %s package (run `make %s`): %v", env, modules, pkg, target, err)
		}
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("%s is set but node is not on PATH: %v", env, err)
	}
	return node, modules
}

// startPolicy writes policy into dir under name and runs the data plane on
// it against upstream, returning its traffic address.
func startPolicy(t *testing.T, dir, name, policy, upstream string) string {
	t.Helper()
	bin := testbin.Build(t, "./cmd/dataplane")
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	return runBinary(t, bin, []string{"--policy", path, "--backend-url", "up=" + upstream,
		"--hash-key-file", filepath.Join(dir, name+".key")})
}

// runNode runs script with node, modules on NODE_PATH and env, within
// limit, and returns what it printed.
func runNode(t *testing.T, node, modules, script string, limit time.Duration, env ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "client.js")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, path)
	cmd.Env = append(append(os.Environ(), "NODE_PATH="+modules), env...)
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("node client script: %v\nstdout: %s\nstderr: %s", err, out, stderr)
	}
	return out
}

// TestOpenAINodeClientWithTokenBudgets runs the official openai npm client
// (OPENAI_NODE_MODULES, which `make test` installs into bin/node) against the
// data plane with a token budget and the fake upstream.
func TestOpenAINodeClientWithTokenBudgets(t *testing.T) {
	node, modules := openaiNode(t)
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.5}))
	defer up.Close()
	traffic := startPolicy(t, t.TempDir(), "policy", tokenPolicy, up.URL)
	out := runNode(t, node, modules, openaiScript, time.Minute, "BASE_URL=http://"+traffic+"/v1")
	var got struct {
		JSON struct {
			Usage struct {
				Total int `json:"total_tokens"`
			} `json:"usage"`
		} `json:"json"`
		PlainStream struct {
			Chunks, UsageChunks, EmptyChoices int
		} `json:"plainStream"`
		UsageStream struct {
			Usage *struct {
				Total int `json:"total_tokens"`
			} `json:"usage"`
		} `json:"usageStream"`
		OverBudget struct {
			Status       int    `json:"status"`
			Code         string `json:"code"`
			Type         string `json:"type"`
			LimitType    string `json:"limitType"`
			RetryAfterMS string `json:"retryAfterMs"`
			LimitTokens  string `json:"limitTokens"`
			Name         string `json:"name"`
		} `json:"overBudget"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %q: %v", out, err)
	}
	t.Logf("openai client saw: %s", out)
	if got.JSON.Usage.Total <= 0 {
		t.Errorf("JSON completion usage %+v, want the upstream's", got.JSON.Usage)
	}
	if ps := got.PlainStream; ps.Chunks == 0 || ps.UsageChunks != 0 || ps.EmptyChoices != 0 {
		t.Errorf("stream without include_usage: %+v, want chunks and none with usage or without choices (the injected usage chunk must be stripped)", ps)
	}
	if u := got.UsageStream.Usage; u == nil || u.Total <= 0 {
		t.Errorf("stream with include_usage ended without the usage chunk: %+v", u)
	}
	ob := got.OverBudget
	if ob.Status != 429 || ob.Name != "RateLimitError" || ob.Code != "model_tokens_rate_limit_exceeded" ||
		ob.Type != "rate_limit_exceeded" || ob.LimitType != "model_tokens" || ob.RetryAfterMS == "" || ob.LimitTokens != "2000" {
		t.Errorf("over-budget request: %+v, want a RateLimitError 429 model_tokens_rate_limit_exceeded with retry-after-ms and x-ratelimit-limit-tokens 2000", ob)
	}
}

// herdPolicy is one API key at 5 requests/s (burst 5), queued per key for at
// most 5s, DEPTH requests deep.
const herdPolicy = `apiVersion: fairqueue.dev/v1alpha1
kind: FairQueuePolicy
metadata: {name: herd, namespace: default}
spec:
  backends: [{name: up, url: "http://upstream.invalid:8000"}]
  rateLimits:
    perAPIKey: {requests: 5, period: 1s, burst: 5}
  fairQueuing:
    enabled: true
    tenantDimension: apiKey
    bounds: {maxQueueDepthPerTenant: DEPTH, maxWait: 5s}
`

// herdScript sends, with openai-node at maxRetries 4, rounds of concurrent
// calls on a fresh API key each (ROUNDS: [{"base": url, "calls": n}, ...];
// rounds on one base run one after the other, bases at once), and prints per
// round the calls that succeeded, that ended in a 429 after every retry, and
// that failed otherwise, the attempts made (from x-stainless-retry-count)
// and the time taken.
const herdScript = `
const OpenAI = require('openai');
const rounds = JSON.parse(process.env.ROUNDS);
const messages = [{ role: 'user', content: 'hi' }];
async function round(r, i) {
  let attempts = 0;
  const fetchCounting = (url, init) => { attempts++; return fetch(url, init); };
  const client = new OpenAI({ baseURL: r.base, apiKey: 'sk-herd-' + i, maxRetries: 4, fetch: fetchCounting });
  const out = { calls: r.calls, ok: 0, final429: 0, other: [], attempts: 0, ms: 0 };
  const start = Date.now();
  await Promise.all(Array.from({ length: r.calls }, async () => {
    try {
      await client.chat.completions.create({ model: 'm', max_tokens: 5, messages });
      out.ok++;
    } catch (e) {
      if (e.status === 429) out.final429++; else out.other.push(String(e.status || e.message));
    }
  }));
  out.ms = Date.now() - start;
  out.attempts = attempts;
  return out;
}
(async () => {
  const byBase = {};
  rounds.forEach((r, i) => { (byBase[r.base] = byBase[r.base] || []).push([r, i]); });
  const results = new Array(rounds.length);
  await Promise.all(Object.values(byBase).map(async (list) => {
    for (const [r, i] of list) results[i] = await round(r, i);
  }));
  console.log(JSON.stringify(results));
})().catch((e) => { console.error(e); process.exit(1); });
`

// TestOpenAINodeRetriesFit: openai-node with maxRetries 4 on one key at 5
// requests/s (burst 5) and maxWait 5s. With queue depth 1, 12, 20 and 50
// concurrent calls; with the default depth (32), 50. Every call fits in
// maxWait plus the client's retries, so none may end in a 429: refusals
// issued close together are told successive room times (SPEC 5), and a
// client obeying retry-after-ms comes back when its place frees instead of
// with every other refused client at once.
func TestOpenAINodeRetriesFit(t *testing.T) {
	node, modules := openaiNode(t)
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{}))
	defer up.Close()
	dir := t.TempDir()
	shallow := "http://" + startPolicy(t, dir, "depth1", strings.Replace(herdPolicy, "DEPTH", "1", 1), up.URL) + "/v1"
	deep := "http://" + startPolicy(t, dir, "depth32", strings.Replace(herdPolicy, "DEPTH", "32", 1), up.URL) + "/v1"
	type round struct {
		Base  string `json:"base"`
		Calls int    `json:"calls"`
	}
	rounds := []round{{shallow, 12}, {shallow, 20}, {shallow, 50}, {deep, 50}}
	spec, err := json.Marshal(rounds)
	if err != nil {
		t.Fatal(err)
	}
	out := runNode(t, node, modules, herdScript, 2*time.Minute, "ROUNDS="+string(spec))
	var got []struct {
		Calls    int      `json:"calls"`
		OK       int      `json:"ok"`
		Final429 int      `json:"final429"`
		Other    []string `json:"other"`
		Attempts int      `json:"attempts"`
		MS       int64    `json:"ms"`
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(rounds) {
		t.Fatalf("client output %q: %v", out, err)
	}
	for i, g := range got {
		depth := 1
		if rounds[i].Base == deep {
			depth = 32
		}
		t.Logf("depth %d, %d concurrent calls: %d ok, %d final 429s, other errors %v, %d attempts, %dms",
			depth, g.Calls, g.OK, g.Final429, g.Other, g.Attempts, g.MS)
		if g.OK != g.Calls {
			t.Errorf("depth %d, %d concurrent calls: %d succeeded (%d final 429s, other errors %v), want all",
				depth, g.Calls, g.OK, g.Final429, g.Other)
		}
	}
}
