#!/usr/bin/env bash
# Installs the Debian packages fsdpa builds and tests with, when any is missing
# (python3-torch, libtorch-dev, python3-dev and pybind11-dev: the torch
# binding's build and its CPU tests).
set -euo pipefail
packages=(cmake g++ make pkg-config git libgtest-dev libgmock-dev libopenblas-dev python3-numpy python3-pytest
  python3-venv python3-setuptools python3-wheel libcli11-dev nlohmann-json3-dev libfmt-dev
  clang libclang-rt-14-dev python3-dev python3-torch libtorch-dev pybind11-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "fsdpa: installing ${missing[*]}" >&2
if [ "$(id -u)" -ne 0 ]; then
  sudo=sudo
else
  sudo=
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
