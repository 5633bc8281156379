#!/usr/bin/env bash
# Installs every build and test dependency of Holdfast from Debian 12's packages.
# Idempotent; safe to rerun. Needs root (or sudo).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PKGS=(
  build-essential cmake ninja-build ccache pkg-config git ca-certificates
  dpkg-dev file help2man
  libtorch-dev libopenblas0-openmp libgloo-dev
  libboost-dev libspdlog-dev libfmt-dev libsqlite3-dev sqlite3
  libtomlplusplus-dev libcli11-dev nlohmann-json3-dev libxxhash-dev
  prometheus-cpp-dev prometheus
  googletest libgtest-dev libgmock-dev
  python3 python3-torch python3-numpy
  clang libclang-rt-14-dev
  slurm-wlm slurmctld slurmd munge libmunge-dev libslurm-dev iproute2
  libssl-dev
  elfutils
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PKGS[@]} packages present"
fi

# Debian's libtorch otherwise runs on the reference BLAS (~18x slower); the openmp
# OpenBLAS variant also obeys torch::set_num_threads.
blas=$(readlink -f /etc/alternatives/libblas.so.3-x86_64-linux-gnu 2>/dev/null || true)
case "$blas" in
  *openblas-openmp*) ;;
  *) echo "setup: warning: libblas.so.3 points to '${blas:-?}', not OpenBLAS (openmp); training will be slow" >&2 ;;
esac
