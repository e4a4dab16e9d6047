#!/usr/bin/env bash
# Installs what trainkit needs to build, test and run on Debian 12 (as root, or with sudo available).
set -euo pipefail
PKGS=(build-essential cmake g++ pkg-config zlib1g-dev libopenblas-openmp-dev libcli11-dev libfmt-dev
      libgtest-dev libbenchmark-dev libdnnl-dev libhdf5-dev libzip-dev nlohmann-json3-dev dataset-fashion-mnist clang-format clang
      libopenmpi-dev openmpi-bin
      ccache python3-dev python3-venv python3-pip)  # the Python package (pip install .): docs/python.md
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
