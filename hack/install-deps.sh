#!/usr/bin/env bash
# Debian packages the local cluster and image builds need (and tmux, the real terminal the console's e2e
# test draws in; skopeo, which pushes the images to a registry for CLUSTER=current, and docker-registry,
# the registry its test pushes to; dbus-daemon, the bus of the second real node's logind stand-in); installs
# only what is missing.
set -euo pipefail
started=$(date +%s.%N)
# A row of `make demo`'s stage table (hack/stages.py), when it records them.
stage() { [ -z "${DTJOB_STAGES_DIR:-}" ] || (cd "$(dirname "$0")/.." && python3 -m hack.stages record packages "$started" "$1"); }
# python3-yaml: `make build` imports localcluster (localcluster/kueue.py reads YAML) with the system Python,
# before the venv exists.
packages=(containerd runc containernetworking-plugins iptables conntrack mmdebstrap buildah skopeo docker-registry gcc libc6-dev iproute2 openssl tmux dbus-daemon python3-yaml)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "[deps] Debian packages present"
  stage cached
  exit 0
fi
echo "[deps] installing: ${missing[*]}"
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "[deps] installed in $((SECONDS - start))s"
stage done
