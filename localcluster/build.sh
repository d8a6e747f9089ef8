#!/usr/bin/env bash
# Builds the local cluster's binaries from the Go module proxy, once per pinned version.
#
# Each tool has its own wrapper module under gomod/<tool>/ (go.mod + go.sum pin every dependency).
# Output goes to $DTJOB_CACHE/bin/<tool>-<hash of its go.mod+go.sum>/, outside the repo, so a
# version bump or a re-pin rebuilds and everything else is reused. Prints progress and timings.
#
# Usage: build.sh [tool...]   (tools: etcd k8s kwok coredns helm kueue; default: all)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
cache=${DTJOB_CACHE:-/var/cache/dtjob}
export GOTOOLCHAIN=local GOFLAGS="-trimpath -buildvcs=false" CGO_ENABLED=0
jobs=${DTJOB_BUILD_JOBS:-$(nproc)}

k8s_version=v1.34.4
etcd_version=v3.6.16
kwok_version=v0.7.0
coredns_version=v1.12.4
helm_version=v3.19.5
kueue_version=v0.14.0  # v0.13.x and v0.14.1 answer 403 at the module proxy (2026-11-23)

key() {
  # shellcheck disable=SC2046  # the overlay scripts' paths have no spaces
  cat "$here/gomod/$1/go.mod" "$here/gomod/$1/go.sum" $(find "$here/gomod/$1" -name '*.sed' | sort) \
    | sha256sum | cut -c1-12
}
outdir() { echo "$cache/bin/$1-$(key "$1")"; }

# stage NAME STARTED STATE: a row of `make demo`'s stage table (hack/stages.py), when it records them.
stage() { [ -z "${DTJOB_STAGES_DIR:-}" ] || (cd "$here/.." && python3 -m hack.stages record "$@"); }

# build TOOL LDFLAGS PACKAGE...: go build into the tool's cache dir unless its stamp exists.
build() {
  local tool=$1 ldflags=$2; shift 2
  local out started; out=$(outdir "$tool"); started=$(date +%s.%N)
  if [ -f "$out/.complete" ]; then
    echo "[build] $tool: cached in $out"
    stage "go-$tool" "$started" cached
    return
  fi
  echo "[build] $tool: building ${*##*/} into $out (cold builds take minutes; log: $out.log)"
  mkdir -p "$out"
  local start=$SECONDS
  # A ticker on the terminal so a long cold build shows it is alive.
  (while sleep 60; do echo "[build] $tool: still building, $((SECONDS - start))s"; done) &
  local ticker=$!
  if ! (cd "$here/gomod/$tool" && go mod download && patched "$tool" "$out" \
      && go build -p "$jobs" -modfile "$out/build.mod" -ldflags "$ldflags" -o "$out/" "$@") >"$out.log" 2>&1; then
    kill "$ticker" 2>/dev/null
    echo "[build] $tool FAILED after $((SECONDS - start))s:"
    tail -n 30 "$out.log"
    stage "go-$tool" "$started" failed
    exit 1
  fi
  kill "$ticker" 2>/dev/null
  touch "$out/.complete"
  echo "[build] $tool: done in $((SECONDS - start))s"
  stage "go-$tool" "$started" done
}

# patched TOOL OUT: OUT/build.mod, the tool's go.mod, with each module that has sed scripts under
# gomod/TOOL/<module>@<version>/ replaced by a copy of it under OUT/src with the scripts applied (Go
# refuses -overlay for files in the module cache). A script that changes nothing fails the build: the
# upstream line it fixes has moved.
patched() {
  local tool=$1 out=$2 script rel rest module file dir copy
  cp go.mod "$out/build.mod"; cp go.sum "$out/build.sum"
  while IFS= read -r script; do
    rel=${script#"$here/gomod/$tool/"}; rel=${rel%.sed}
    rest=${rel#*@}; module="${rel%%@*}@${rest%%/*}"; file=${rest#*/}
    dir=$(go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    copy="$out/src/$module"
    if [ ! -d "$copy" ]; then
      mkdir -p "$copy"; cp -r "$dir/." "$copy/"; chmod -R u+w "$copy"
      go mod edit -modfile "$out/build.mod" -replace "$module=$copy"
    fi
    sed -i -f "$script" "$copy/$file"
    if cmp -s "$dir/$file" "$copy/$file"; then echo "patch $rel: the sed script changed nothing"; return 1; fi
  done < <(find "$here/gomod/$tool" -name '*.sed' | sort)
}

build_k8s() {
  local date ld="-s -w" p
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local minor=${k8s_version#v1.}; minor=${minor%%.*}
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date -X $p.gitCommit=module-$k8s_version"
  done
  build k8s "$ld" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy \
    k8s.io/kubernetes/cmd/kubectl
}

# Kueue's CRDs and webhook registrations, from the same module, next to its binary (localcluster.kueue
# applies them; the webhooks' service references become URLs there).
# With them, the ProvisioningRequest CRD of the cluster-autoscaler API module Kueue is built against (the
# Dynamic Workload Scheduler's API: Kueue's provisioning admission check needs it at its start).
kueue_manifests() {
  local out dir; out=$(outdir kueue)
  [ -f "$out/config/.complete-2" ] && return
  moddir() { (cd "$here/gomod/kueue" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'); }
  dir=$(moddir sigs.k8s.io/kueue)
  rm -rf "$out/config" && mkdir -p "$out/config/crd"
  cp "$dir"/config/components/crd/bases/*.yaml "$out/config/crd/"
  cp "$dir/config/components/webhook/manifests.yaml" "$out/config/webhooks.yaml"
  cp "$(moddir k8s.io/autoscaler/cluster-autoscaler/apis)/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml" \
    "$out/config/provisioningrequests.yaml"
  chmod -R u+w "$out/config" && touch "$out/config/.complete-2"
}

build_tool() {
  case $1 in
    # The main package is the module root .../server/v3, which go names "server": rename it after the build.
    etcd) build etcd "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" go.etcd.io/etcd/server/v3
      [ -f "$(outdir etcd)/server" ] && mv "$(outdir etcd)/server" "$(outdir etcd)/etcd"; true ;;
    k8s) build_k8s ;;
    kwok) build kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" sigs.k8s.io/kwok/cmd/kwok ;;
    coredns) build coredns "-s -w" github.com/coredns/coredns ;;
    helm) build helm "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version \
-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34" \
      helm.sh/helm/v3/cmd/helm ;;
    kueue) build kueue "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version \
-X sigs.k8s.io/kueue/pkg/version.GitCommit=431c2e538b87319c838e3a993dfeec2b077f8fa2" sigs.k8s.io/kueue/cmd/kueue
      kueue_manifests ;;
    *) echo "unknown tool: $1" >&2; exit 2 ;;
  esac
}

# `build.sh --print-dirs` tells the Python side where each tool's binaries are.
if [ "${1:-}" = "--print-dirs" ]; then
  for t in etcd k8s kwok coredns helm kueue; do echo "$t=$(outdir "$t")"; done
  exit 0
fi

total=$SECONDS
for tool in "${@:-etcd k8s kwok coredns helm kueue}"; do
  for t in $tool; do build_tool "$t"; done
done
echo "[build] all requested tools ready in $((SECONDS - total))s"
