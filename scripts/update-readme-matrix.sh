#!/usr/bin/env bash
# Replaces README.md's support-matrix block with `fsdpa plan --matrix`.
# Run after a full build (all head dims, CUDA backend on) so the block shows
# everything the library can be built with.
set -euo pipefail
cd "$(dirname "$0")/.."
matrix=$(build/bin/fsdpa plan --matrix)
/usr/bin/env python3 - "$matrix" <<'PY'
import re, sys
readme = open("README.md").read()
block = "<!-- matrix:begin -->\n" + sys.argv[1].rstrip() + "\n<!-- matrix:end -->"
new = re.sub(r"<!-- matrix:begin -->.*?<!-- matrix:end -->", lambda _: block, readme, flags=re.S)
open("README.md", "w").write(new)
PY
