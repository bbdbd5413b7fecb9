#!/usr/bin/env bash
# Builds the envtest control plane (kube-apiserver, etcd and, when none is on
# PATH, kubectl) from Go modules into bin/k8s/. Prebuilt envtest archives cannot
# be downloaded here, so the versions are pinned by hack/envtest/go.mod instead.
#
# Idempotent: a binary is rebuilt only when it is missing or reports a version
# other than the pinned one. Prints the asset directory on its last line.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${ENVTEST_DIR:-$root/bin/k8s}
mod=$root/hack/envtest
kube_version=$(awk '$1=="k8s.io/kubernetes"{print $2}' "$mod/go.mod")
etcd_version=$(awk '$1=="go.etcd.io/etcd/server/v3"{print $2}' "$mod/go.mod")
mkdir -p "$out"

log() { printf '[envtest] %s\n' "$*" >&2; }

# build NAME PACKAGE WANT VERSION_ARGS... builds PACKAGE into $out/NAME unless
# "$out/NAME VERSION_ARGS" already prints WANT.
build() {
	local name=$1 pkg=$2 want=$3 ldflags=$4
	shift 4
	if [[ -x $out/$name ]] && "$out/$name" "$@" 2>/dev/null | grep -qF -- "$want"; then
		log "$name $want present"
		return
	fi
	log "building $name $want (first build takes several minutes; later builds reuse the Go cache)"
	local start=$SECONDS
	(cd "$mod" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg")
	mv "$out/$name.tmp" "$out/$name"
	log "built $name in $((SECONDS - start))s"
}

kube_minor=$(cut -d. -f2 <<<"$kube_version")
vflags="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_version" "-s -w $vflags" --version
build etcd go.etcd.io/etcd/server/v3 "${etcd_version#v}" "-s -w" --version
if [[ ${ENVTEST_KUBECTL:-auto} == always ]] || ! command -v kubectl >/dev/null 2>&1; then
	build kubectl k8s.io/kubernetes/cmd/kubectl "$kube_version" "-s -w $vflags" version --client
fi
echo "$out"
