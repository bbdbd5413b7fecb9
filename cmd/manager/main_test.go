package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    options
		wantErr string
	}{
		{
			name: "defaults",
			want: options{metricsAddr: ":8080", probeAddr: ":8081", leaderElect: true, maxConcurrentReconciles: 2, kubeAPIQPS: 50, kubeAPIBurst: 100},
		},
		{
			name: "API rate limit",
			args: []string{"--kube-api-qps", "20.5", "--kube-api-burst", "30"},
			want: options{metricsAddr: ":8080", probeAddr: ":8081", leaderElect: true, maxConcurrentReconciles: 2, kubeAPIQPS: 20.5, kubeAPIBurst: 30},
		},
		{name: "QPS zero", args: []string{"--kube-api-qps", "0"}, wantErr: "--kube-api-qps must be in [1, 10000], got 0"},
		{name: "QPS NaN", args: []string{"--kube-api-qps", "NaN"}, wantErr: "--kube-api-qps must be in [1, 10000], got NaN"},
		{name: "burst zero", args: []string{"--kube-api-burst", "0"}, wantErr: "--kube-api-burst must be in [1, 10000], got 0"},
		{
			name: "namespaces are trimmed and deduplicated",
			args: []string{"--namespaces", " team-a,,team-b, team-a ", "--leader-elect=false", "--metrics-bind-address=0"},
			want: options{namespaces: []string{"team-a", "team-b"}, metricsAddr: "0", probeAddr: ":8081", maxConcurrentReconciles: 2, kubeAPIQPS: 50, kubeAPIBurst: 100},
		},
		{name: "invalid namespace", args: []string{"--namespaces", "Team_A"}, wantErr: `--namespaces: "Team_A" is not a namespace name`},
		{name: "reconciles out of range", args: []string{"--max-concurrent-reconciles", "0"}, wantErr: "--max-concurrent-reconciles must be in [1, 64], got 0"},
		{name: "positional argument", args: []string{"run"}, wantErr: `unexpected arguments ["run"]`},
		{name: "unknown flag", args: []string{"--namespace", "a"}, wantErr: "flag provided but not defined: -namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			got, err := parseFlags(fs, tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseFlags(%q) error = %v, want it to contain %q", tt.args, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseFlags(%q) = %v", tt.args, err)
			}
			if strings.Join(got.namespaces, ",") != strings.Join(tt.want.namespaces, ",") ||
				got.metricsAddr != tt.want.metricsAddr || got.probeAddr != tt.want.probeAddr ||
				got.leaderElect != tt.want.leaderElect || got.maxConcurrentReconciles != tt.want.maxConcurrentReconciles ||
				got.leaderElectionNamespace != tt.want.leaderElectionNamespace ||
				got.kubeAPIQPS != tt.want.kubeAPIQPS || got.kubeAPIBurst != tt.want.kubeAPIBurst {
				t.Errorf("parseFlags(%q) = %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
}
