//go:build tools

// Package envtest records the control-plane binaries built by hack/envtest.sh so
// that `go mod tidy` keeps their modules pinned in go.mod.
package envtest

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
