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

# PROGRESS_EVERY is how often, in seconds, a build in progress says how far
# it got: a first build takes many minutes, and silence looks like a hang.
progress_every=${PROGRESS_EVERY:-15}
warned=false

# build NAME PACKAGE WANT VERSION_ARGS... builds PACKAGE into $out/NAME unless
# "$out/NAME VERSION_ARGS" already prints WANT.
build() {
	local name=$1 pkg=$2 want=$3 ldflags=$4
	shift 4
	if [[ -x $out/$name ]] && "$out/$name" "$@" 2>/dev/null | grep -qF -- "$want"; then
		log "$name $want present"
		return
	fi
	if [[ $warned == false ]]; then
		warned=true
		log "first run builds kube-apiserver and etcd from source: ~10-20 min on 2 cores; cached in ${out#"$root"/}/ afterwards"
		log "(make demo-standalone needs none of this and answers in about a minute)"
	fi
	log "building $name $want from $pkg"
	local start=$SECONDS buildlog
	buildlog=$(mktemp)
	# -v names each package as it is compiled: the progress lines count them.
	(cd "$mod" && CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$out/$name.tmp" "$pkg") 2>"$buildlog" &
	local pid=$! status=0 said=$SECONDS n last
	while kill -0 "$pid" 2>/dev/null; do
		sleep 1
		if ((SECONDS - said >= progress_every)) && kill -0 "$pid" 2>/dev/null; then
			said=$SECONDS
			n=$(grep -c . "$buildlog" || true)
			last=$(tail -n 1 "$buildlog")
			if ((n == 0)); then
				log "building $name: $(elapsed $((SECONDS - start))) so far, reusing the Go build cache or linking"
			else
				log "building $name: $(elapsed $((SECONDS - start))) so far, $n packages compiled (last: $last)"
			fi
		fi
	done
	wait "$pid" || status=$?
	if ((status != 0)); then
		cat "$buildlog" >&2
		rm -f "$buildlog"
		log "building $name failed after $(elapsed $((SECONDS - start)))"
		return "$status"
	fi
	rm -f "$buildlog"
	mv "$out/$name.tmp" "$out/$name"
	log "built $name in $(elapsed $((SECONDS - start)))"
}

# elapsed SECONDS prints a duration as 4m05s.
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

kube_minor=$(cut -d. -f2 <<<"$kube_version")
vflags="-X k8s.io/component-base/version.gitVersion=$kube_version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$kube_minor"
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$kube_version" "-s -w $vflags" --version
build etcd go.etcd.io/etcd/server/v3 "${etcd_version#v}" "-s -w" --version
if [[ ${ENVTEST_KUBECTL:-auto} == always ]] || ! command -v kubectl >/dev/null 2>&1; then
	build kubectl k8s.io/kubernetes/cmd/kubectl "$kube_version" "-s -w $vflags" version --client
fi
echo "$out"
