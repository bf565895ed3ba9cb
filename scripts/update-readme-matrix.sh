#!/usr/bin/env bash
# Replaces README.md's support-matrix block with `fsdpa plan --matrix`, or
# with a file holding that output (bench/device.sh writes one from a full
# build on the GPU machine: all head dims, the CUDA backend on).
#   scripts/update-readme-matrix.sh [FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then
  matrix=$(cat "$1")
else
  matrix=$(build/bin/fsdpa plan --matrix)
fi
/usr/bin/env python3 - "$matrix" <<'PY'
import re, sys
readme = open("README.md").read()
block = "<!-- matrix:begin -->\n" + sys.argv[1].rstrip() + "\n<!-- matrix:end -->"
new = re.sub(r"<!-- matrix:begin -->.*?<!-- matrix:end -->", lambda _: block, readme, flags=re.S)
open("README.md", "w").write(new)
PY
