#!/usr/bin/env bash
# Configures and builds fsdpa in ./build (the CUDA backend too when nvcc is
# found). Extra CMake arguments: FSDPA_CMAKE_ARGS, e.g.
#   FSDPA_CMAKE_ARGS="-DFSDPA_CUDA=OFF" scripts/build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
mkdir -p build
# shellcheck disable=SC2086
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${FSDPA_CMAKE_ARGS:-} >build/configure.log ||
  { cat build/configure.log; exit 1; }
cmake --build build -j "$(nproc)"
