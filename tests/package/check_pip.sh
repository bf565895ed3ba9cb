#!/usr/bin/env bash
# `pip install --no-build-isolation .` from a copy of the source tree (what a
# clean clone has: tracked and unignored files) into a fresh venv, then
# `import fsdpa` from elsewhere with no FSDPA_LIBRARY or PYTHONPATH: the
# wheel must carry the library (and the torch binding, where the Python has
# torch). CPU-only build (the CUDA build of the same
# setup.py runs on the GPU machine: bench/device.sh ecosystem).
#   check_pip.sh SOURCE_DIR WORK_DIR PYTHON
set -euo pipefail
src=$1 work=$2 python=$3
rm -rf "$work"
mkdir -p "$work/src"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
  git -C "$src" ls-files -co --exclude-standard -z | (cd "$src" && xargs -0 cp --parents -t "$work/src")
else  # a copy of the tree without its .git (the GPU machine's): all but the build directories
  tar -C "$src" --exclude='./build*' --exclude=./.devbuild -cf - . | tar -C "$work/src" -xf -
fi
"$python" -m venv --system-site-packages "$work/venv"
# The packages of the interpreter that made the venv (numpy, setuptools,
# torch), also when that interpreter is itself a venv's.
"$python" -c "import site; print('\n'.join(site.getsitepackages()))" \
  >"$("$work/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/creator.pth"
(cd "$work/src" && FSDPA_CMAKE_ARGS="${FSDPA_PIP_CMAKE_ARGS:--DFSDPA_CUDA=OFF}" \
  "$work/venv/bin/pip" install --no-build-isolation --no-index -q .)
cd "$work"
env -u FSDPA_LIBRARY -u PYTHONPATH "$work/venv/bin/python" - <<'PY'
import numpy as np

import fsdpa

path = fsdpa.library_path()
assert "/site-packages/fsdpa/lib/" in path, path
q = np.ones((1, 2, 3, 8), np.float32)
assert np.allclose(fsdpa.attention(q, q, q), 1.0)
try:
    import torch
except ImportError:
    torch = None
if torch is not None:  # the wheel carries the torch binding, built for this torch
    assert fsdpa._capi.torch_native() is not None, "no torch binding in the wheel"
    t = torch.ones((1, 2, 3, 8))
    assert torch.allclose(fsdpa.attention(t, t, t), torch.ones(()))
if fsdpa.backend_built("cuda"):
    x = torch.ones((1, 2, 3, 64), device="cuda", dtype=torch.float16)
    assert torch.allclose(fsdpa.attention(x, x, x).float(), torch.ones(()).cuda())
print("pip install ok:", fsdpa.version(), path, "cuda" if fsdpa.backend_built("cuda") else "")
PY
