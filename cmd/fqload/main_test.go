package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fairqueue/fairqueue/internal/loadgen"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func files(contents map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if c, ok := contents[name]; ok {
			return []byte(c), nil
		}
		return nil, fs.ErrNotExist
	}
}

func TestParse(t *testing.T) {
	spec := `
targets: [http://127.0.0.1:8080]
duration: 20s
timeout: 5s
maxOutstanding: 64
tenants:
- {name: heavy, rate: 50, apiKeyEnv: HEAVY_KEY}
- {name: late, rate: 1, team: research, start: 5s, stop: 15s}
`
	tests := []struct {
		name    string
		args    []string
		check   func(t *testing.T, c loadgen.Config)
		wantErr string
	}{{
		name: "flags only",
		args: []string{"--target", "http://127.0.0.1:8080,http://127.0.0.1:8081", "--duration", "3s",
			"--tenant", "name=a,rate=2.5,api-key=sk-a,user=alice,header=x-extra:1"},
		check: func(t *testing.T, c loadgen.Config) {
			want := loadgen.Tenant{Name: "a", Rate: 2.5, APIKey: "sk-a", User: "alice", Headers: map[string]string{"x-extra": "1"}}
			if !reflect.DeepEqual(c.Tenants, []loadgen.Tenant{want}) {
				t.Errorf("tenants %+v, want [%+v]", c.Tenants, want)
			}
			if len(c.Targets) != 2 || c.Duration != 3*time.Second || c.MaxOutstanding != loadgen.DefaultMaxOutstanding {
				t.Errorf("targets %v duration %v max outstanding %d", c.Targets, c.Duration, c.MaxOutstanding)
			}
		},
	}, {
		name: "spec file with an explicit flag overriding it",
		args: []string{"--spec", "load.yaml", "--duration", "30s", "--tenant", "name=extra,rate=3"},
		check: func(t *testing.T, c loadgen.Config) {
			if c.Duration != 30*time.Second || c.Timeout != 5*time.Second || c.MaxOutstanding != 64 {
				t.Errorf("duration %v timeout %v max outstanding %d, want 30s (flag), 5s and 64 (spec)", c.Duration, c.Timeout, c.MaxOutstanding)
			}
			if len(c.Tenants) != 3 || c.Tenants[0].APIKey != "sk-heavy" || c.Tenants[2].Name != "extra" {
				t.Fatalf("tenants %+v, want heavy (key from env), late, extra", c.Tenants)
			}
			if late := c.Tenants[1]; late.Start != 5*time.Second || late.Stop != 15*time.Second || late.Team != "research" {
				t.Errorf("late tenant %+v, want start 5s stop 15s team research", late)
			}
		},
	}, {
		name: "request size and streaming from a flag and a spec file",
		args: []string{"--spec", "sized.yaml", "--tenant", "name=flag,rate=1,prompt-bytes=400,max-tokens=50,stream=true"},
		check: func(t *testing.T, c loadgen.Config) {
			want := []loadgen.Tenant{
				{Name: "spec", Rate: 2, PromptBytes: 4000, MaxTokens: 100},
				{Name: "flag", Rate: 1, PromptBytes: 400, MaxTokens: 50, Stream: true},
			}
			if !reflect.DeepEqual(c.Tenants, want) {
				t.Errorf("tenants %+v, want %+v", c.Tenants, want)
			}
		},
	}, {
		name:    "request size that is not a number",
		args:    []string{"--target", "http://127.0.0.1:1", "--tenant", "name=a,rate=1,prompt-bytes=4k"},
		wantErr: `prompt-bytes "4k" is not a whole number`,
	}, {
		name:    "negative max tokens",
		args:    []string{"--target", "http://127.0.0.1:1", "--tenant", "name=a,rate=1,max-tokens=-1"},
		wantErr: "max tokens -1 must be between 0",
	}, {
		name:    "stream that is not a boolean",
		args:    []string{"--target", "http://127.0.0.1:1", "--tenant", "name=a,rate=1,stream=yes"},
		wantErr: `stream "yes" is not true or false`,
	}, {
		name:    "unknown tenant key",
		args:    []string{"--target", "http://127.0.0.1:1", "--tenant", "name=a,rate=1,weight=3"},
		wantErr: `unknown key "weight"`,
	}, {
		name:    "bad key never echoed",
		args:    []string{"--target", "http://127.0.0.1:1", "--tenant", "name=a,rate=x,api-key=sk-secret"},
		wantErr: `api-key=REDACTED`,
	}, {
		name:    "empty key variable",
		args:    []string{"--target", "http://127.0.0.1:1", "--tenant", "name=a,rate=1,api-key-env=NOPE"},
		wantErr: "environment variable NOPE",
	}, {
		name:    "no tenants",
		args:    []string{"--target", "http://127.0.0.1:1"},
		wantErr: "0 tenants configured",
	}, {
		name:    "missing spec file",
		args:    []string{"--spec", "absent.yaml"},
		wantErr: "reading --spec",
	}, {
		name:    "unknown spec field",
		args:    []string{"--spec", "typo.yaml"},
		wantErr: `unknown field "tenant"`,
	}, {
		name:    "positional argument",
		args:    []string{"http://127.0.0.1:1"},
		wantErr: "every setting is a flag",
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parse(tc.args, io.Discard, env(map[string]string{"HEAVY_KEY": "sk-heavy"}),
				files(map[string]string{"load.yaml": spec, "typo.yaml": "tenant: []\n",
					"sized.yaml": "targets: [http://127.0.0.1:1]\ntenants:\n- {name: spec, rate: 2, promptBytes: 4000, maxTokens: 100}\n"}))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "sk-secret") {
					t.Errorf("error repeats the API key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg)
		})
	}
}

// TestRunPrintsSummary runs the command against a local server and checks
// the JSON a demo script would read.
func TestRunPrintsSummary(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-user-id") == "bob" {
			w.Header().Set("x-fair-queue-wait-ms", "40")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = io.WriteString(w, `{"error":{"details":{"limit_type":"user","fair_queue":{"reason":"tenant_queue_full"}}}}`)
		}
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--target", srv.URL, "--duration", "3ms",
		"--tenant", "name=alice,rate=1000,user=alice", "--tenant", "name=bob,rate=1000,user=bob"},
		&stdout, &stderr, env(nil), files(nil))
	if err != nil {
		t.Fatalf("run: %v, stderr %s", err, stderr.String())
	}
	var got struct {
		Tenants []struct {
			Name            string         `json:"name"`
			Offered         int            `json:"offered"`
			Admitted        int            `json:"admitted"`
			RefusedByReason map[string]int `json:"refused_by_reason"`
			Status          map[string]int `json:"status"`
			WaitMS          map[string]any `json:"wait_ms"`
			AdmittedPerSec  []int          `json:"admitted_per_second"`
		} `json:"tenants"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not the JSON summary: %v\n%s", err, stdout.String())
	}
	if len(got.Tenants) != 2 {
		t.Fatalf("%d tenants in the summary, want 2", len(got.Tenants))
	}
	alice, bob := got.Tenants[0], got.Tenants[1]
	if alice.Offered != 3 || alice.Admitted != 3 || alice.Status["200"] != 3 || len(alice.AdmittedPerSec) == 0 {
		t.Errorf("alice %+v, want 3 offered and admitted with a per-second series", alice)
	}
	if bob.Offered != 3 || bob.Admitted != 0 || bob.RefusedByReason["tenant_queue_full"] != 3 || !near(bob.WaitMS["p50"], 40) {
		t.Errorf("bob %+v, want 3 refused as tenant_queue_full with a 40ms wait", bob)
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--target", "127.0.0.1:8080", "--tenant", "name=a,rate=1"},
		&stdout, &stderr, env(nil), files(nil))
	if err == nil || stdout.Len() != 0 || !strings.Contains(err.Error(), "not an absolute http(s) URL") {
		t.Errorf("run: %v, stdout %q; want the reason and nothing printed", err, stdout.String())
	}
}

// near reports whether a JSON number is within 1% of want, the summary's
// stated precision.
func near(v any, want float64) bool {
	f, ok := v.(float64)
	return ok && f > want*0.99 && f < want*1.01
}
