#!/usr/bin/env bash
# Builds fsdpa and runs every test that needs no GPU (label `gpu` excluded).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build -LE gpu --output-on-failure -j "$(nproc)"
