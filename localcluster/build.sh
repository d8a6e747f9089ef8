#!/usr/bin/env bash
# Builds the local cluster's binaries from the Go module proxy, once per pinned version.
#
# Two wrapper modules under gomod/ pin every dependency (go.mod + go.sum): gomod/etcd/ for etcd, and
# gomod/cluster/ for all the others, so that the dependencies they share (client-go, apimachinery, grpc,
# ~2,400 packages) have one version and are compiled once: cold, with one module per tool, 6,228 package
# builds; with the shared module, 2,944. Output goes to $DTJOB_CACHE/bin/<module>-<hash of its go.mod,
# go.sum and patches>/, outside the repo, with a stamp per tool, so a re-pin rebuilds and everything else
# is reused. Prints progress and timings.
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

# The wrapper module a tool is built from.
module_of() { case $1 in etcd) echo etcd ;; *) echo cluster ;; esac; }
key() {
  # shellcheck disable=SC2046  # the overlay scripts' paths have no spaces
  cat "$here/gomod/$1/go.mod" "$here/gomod/$1/go.sum" $(find "$here/gomod/$1" -name '*.sed' -o -name '*.go' | sort) \
    | sha256sum | cut -c1-12
}
outdir() { local m; m=$(module_of "$1"); echo "$cache/bin/$m-$(key "$m")"; }

# stage NAME STARTED STATE: a row of `make demo`'s stage table (hack/stages.py), when it records them.
stage() { [ -z "${DTJOB_STAGES_DIR:-}" ] || (cd "$here/.." && python3 -m hack.stages record "$@"); }

# build MODULE TOOL...: one go build of the tools' packages into the module's cache dir, but of those
# whose stamp exists: the tools of one module link side by side from one set of compiled packages.
build() {
  local module=$1; shift
  local out started todo=() packages=() ldflags="-s -w" tool
  out=$(outdir "$1"); started=$(date +%s.%N)
  for tool; do
    if [ -f "$out/.complete-$tool" ]; then
      echo "[build] $tool: cached in $out"
      stage "go-$tool" "$started" cached
    else
      todo+=("$tool")
    fi
  done
  [ ${#todo[@]} -gt 0 ] || return 0
  for tool in "${todo[@]}"; do
    read -ra more <<<"$(packages "$tool")"; packages+=("${more[@]}")
    ldflags+=" $(ldflags "$tool")"
  done
  echo "[build] ${todo[*]}: building ${packages[*]##*/} into $out (cold builds take minutes; log: $out.log)"
  mkdir -p "$out"
  local start=$SECONDS
  # A ticker on the terminal so a long cold build shows it is alive.
  (while sleep 60; do echo "[build] ${todo[*]}: still building, $((SECONDS - start))s"; done) &
  local ticker=$!
  if ! (cd "$here/gomod/$module" && go mod download && patched "$module" "$out" \
      && go build -p "$jobs" -modfile "$out/build.mod" -ldflags "$ldflags" -o "$out/" "${packages[@]}") \
      >"$out.log" 2>&1; then
    kill "$ticker" 2>/dev/null
    echo "[build] ${todo[*]} FAILED after $((SECONDS - start))s:"
    tail -n 30 "$out.log"
    for tool in "${todo[@]}"; do stage "go-$tool" "$started" failed; done
    exit 1
  fi
  kill "$ticker" 2>/dev/null
  echo "[build] ${todo[*]}: done in $((SECONDS - start))s"
  # Built together, the tools' rows share one span.
  for tool in "${todo[@]}"; do touch "$out/.complete-$tool"; stage "go-$tool" "$started" done; done
}

# patched MODULE OUT: OUT/build.mod, the wrapper module's go.mod, with each module that has sed scripts
# under gomod/MODULE/<module>@<version>/ replaced by a copy of it under OUT/src with the scripts applied
# (Go refuses -overlay for files in the module cache). A script that changes nothing fails the build: the
# upstream line it fixes has moved. The copies are made anew each time, so no script is applied twice.
patched() {
  local wrapper=$1 out=$2 script rel rest module file dir copy
  cp go.mod "$out/build.mod"; cp go.sum "$out/build.sum"; rm -rf "$out/src"
  while IFS= read -r script; do
    rel=${script#"$here/gomod/$wrapper/"}; rel=${rel%.sed}
    rest=${rel#*@}; module="${rel%%@*}@${rest%%/*}"; file=${rest#*/}
    dir=$(go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
    copy="$out/src/$module"
    if [ ! -d "$copy" ]; then
      mkdir -p "$copy"; cp -r "$dir/." "$copy/"; chmod -R u+w "$copy"
      go mod edit -modfile "$out/build.mod" -replace "$module=$copy"
    fi
    sed -i -f "$script" "$copy/$file"
    if cmp -s "$dir/$file" "$copy/$file"; then echo "patch $rel: the sed script changed nothing"; return 1; fi
  done < <(find "$here/gomod/$wrapper" -name '*.sed' | sort)
}

# packages TOOL: the main packages a tool is built from.
packages() {
  case $1 in
    # The main package is the module root .../server/v3, which go names "server": renamed after the build.
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    k8s) echo k8s.io/kubernetes/cmd/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kube-proxy,kubectl} ;;
    kwok) echo sigs.k8s.io/kwok/cmd/kwok ;;
    coredns) echo dtjob.local/clusterbuild/coredns ;;  # gomod/cluster/coredns/main.go: the plugins we use
    helm) echo helm.sh/helm/v3/cmd/helm ;;
    kueue) echo sigs.k8s.io/kueue/cmd/kueue ;;
    *) echo "unknown tool: $1" >&2; exit 2 ;;
  esac
}

# ldflags TOOL: the version stamps a tool's binaries carry (each its own packages' variables, so the
# flags of the tools built together add up).
ldflags() {
  local p minor
  case $1 in
    etcd) echo "-X go.etcd.io/etcd/api/v3/version.GitSHA=$etcd_version" ;;
    k8s)
      minor=${k8s_version#v1.}; minor=${minor%%.*}
      for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        echo -n " -X $p.gitVersion=$k8s_version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
        echo -n " -X $p.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ) -X $p.gitCommit=module-$k8s_version"
      done ;;
    kwok) echo "-X sigs.k8s.io/kwok/pkg/consts.Version=$kwok_version" ;;
    coredns) ;;
    helm) echo "-X helm.sh/helm/v3/internal/version.version=$helm_version" \
      "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=34" ;;
    kueue) echo "-X sigs.k8s.io/kueue/pkg/version.GitVersion=$kueue_version" \
      "-X sigs.k8s.io/kueue/pkg/version.GitCommit=431c2e538b87319c838e3a993dfeec2b077f8fa2" ;;
  esac
}

# Kueue's CRDs and webhook registrations, from the same module, next to its binary (localcluster.kueue
# applies them; the webhooks' service references become URLs there).
# With them, the ProvisioningRequest CRD of the cluster-autoscaler API module Kueue is built against (the
# Dynamic Workload Scheduler's API: Kueue's provisioning admission check needs it at its start).
kueue_manifests() {
  local out dir; out=$(outdir kueue)
  [ -f "$out/config/.complete-2" ] && return
  moddir() { (cd "$here/gomod/cluster" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'); }
  dir=$(moddir sigs.k8s.io/kueue)
  rm -rf "$out/config" && mkdir -p "$out/config/crd"
  cp "$dir"/config/components/crd/bases/*.yaml "$out/config/crd/"
  cp "$dir/config/components/webhook/manifests.yaml" "$out/config/webhooks.yaml"
  cp "$(moddir k8s.io/autoscaler/cluster-autoscaler/apis)/config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml" \
    "$out/config/provisioningrequests.yaml"
  chmod -R u+w "$out/config" && touch "$out/config/.complete-2"
}

# `build.sh --print-dirs` tells the Python side where each tool's binaries are.
if [ "${1:-}" = "--print-dirs" ]; then
  for t in etcd k8s kwok coredns helm kueue; do echo "$t=$(outdir "$t")"; done
  exit 0
fi

total=$SECONDS
# shellcheck disable=SC2206  # the tools' names have no spaces
tools=(${*:-etcd k8s kwok coredns helm kueue})
cluster_tools=()
for tool in "${tools[@]}"; do
  packages "$tool" >/dev/null
  case $(module_of "$tool") in
    etcd) build etcd etcd
      [ -f "$(outdir etcd)/server" ] && mv "$(outdir etcd)/server" "$(outdir etcd)/etcd"; true ;;
    cluster) cluster_tools+=("$tool") ;;
  esac
done
[ ${#cluster_tools[@]} -eq 0 ] || build cluster "${cluster_tools[@]}"
[[ " ${tools[*]} " != *" kueue "* ]] || kueue_manifests
echo "[build] all requested tools ready in $((SECONDS - total))s"
