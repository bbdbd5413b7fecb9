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
	"testing"
	"time"

	"github.com/fairqueue/fairqueue/dataplane/fakeupstream"
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

// TestOpenAINodeClientWithTokenBudgets runs the official openai npm client
// (OPENAI_NODE_MODULES, which `make test` installs into bin/node) against the
// data plane with a token budget and the fake upstream.
func TestOpenAINodeClientWithTokenBudgets(t *testing.T) {
	modules := os.Getenv("OPENAI_NODE_MODULES")
	if modules == "" {
		t.Skip("OPENAI_NODE_MODULES is not set; `make test` installs the openai npm package and sets it")
	}
	if _, err := os.Stat(filepath.Join(modules, "openai")); err != nil {
		t.Fatalf("OPENAI_NODE_MODULES=%s has no openai package (run `make openai-node`): %v", modules, err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("OPENAI_NODE_MODULES is set but node is not on PATH: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "dataplane")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	up := httptest.NewServer(fakeupstream.New(fakeupstream.Options{CompletionFraction: 0.5}))
	defer up.Close()
	policy := filepath.Join(dir, "policy.yaml")
	script := filepath.Join(dir, "client.js")
	if err := os.WriteFile(policy, []byte(tokenPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, []byte(openaiScript), 0o600); err != nil {
		t.Fatal(err)
	}
	traffic := runBinary(t, bin, []string{"--policy", policy, "--backend-url", "up=" + up.URL,
		"--hash-key-file", filepath.Join(dir, "key")})

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules, "BASE_URL=http://"+traffic+"/v1")
	out, err := cmd.Output()
	if err != nil {
		var stderr []byte
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("openai client: %v\n%s\n%s", err, out, stderr)
	}
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
