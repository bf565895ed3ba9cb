"""Finding and loading the library; version, support matrix, backends."""

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fsdpa
from fsdpa import _capi

PACKAGE_DIR = Path(fsdpa.__file__).resolve().parent


def test_version():
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", fsdpa.version())
    expected = os.environ.get("FSDPA_EXPECTED_VERSION")
    if expected:
        assert fsdpa.version() == expected


def test_abi_version_and_struct_layouts():
    assert _capi.library().fsdpa_abi_version() == _capi.ABI_VERSION
    for struct, size in _capi.STRUCT_SIZES.items():
        assert ctypes.sizeof(struct) == size


def test_options_default_matches_the_library():
    defaults = _capi.library().fsdpa_options_init()
    assert (defaults.has_scale, defaults.causal, defaults.has_window, defaults.allow_tf32) == (
        0, 0, 0, 0)
    assert defaults.causal_align == _capi.CAUSAL_ALIGN_BOTTOM_RIGHT
    assert defaults.policy == _capi.POLICY_DEFAULT


def test_status_strings():
    lib = _capi.library()
    names = [lib.fsdpa_status_string(status).decode() for status in range(6)]
    assert names == ["ok", "invalid argument", "unsupported", "device error", "internal error",
                     "unknown status"]


def test_support_matrix():
    matrix = fsdpa.support_matrix()
    assert "| cpu |" in matrix
    assert "Backend cpu, bf16, policy auto" in matrix
    assert fsdpa.support_matrix() == matrix


def test_backend_built():
    assert fsdpa.backend_built("cpu") is True
    assert fsdpa.backend_built("cuda") in (True, False)
    with pytest.raises(fsdpa.InvalidArgument,
                       match=r"^fsdpa: backend: expected 'cpu' or 'cuda', got 'tpu'$"):
        fsdpa.backend_built("tpu")


def test_library_path_honours_fsdpa_library():
    if os.environ.get("FSDPA_LIBRARY"):
        assert Path(fsdpa.library_path()) == Path(os.environ["FSDPA_LIBRARY"])
    assert Path(fsdpa.library_path()).is_file()


def test_missing_fsdpa_library_file():
    with pytest.raises(fsdpa.LibraryNotFound,
                       match=r"^fsdpa: FSDPA_LIBRARY=/nonexistent/libfsdpa.so does not name an "):
        _capi.find_library(environ={"FSDPA_LIBRARY": "/nonexistent/libfsdpa.so"})


def test_search_lists_where_it_looked(tmp_path):
    package_dir = tmp_path / "python" / "fsdpa"
    package_dir.mkdir(parents=True)
    (tmp_path / "build-debug").mkdir()
    with pytest.raises(fsdpa.LibraryNotFound) as error:
        _capi.find_library(environ={}, package_dir=package_dir)
    message = str(error.value)
    assert message.startswith("fsdpa: the shared library was not found.")
    assert "FSDPA_LIBRARY" in message
    for where in (package_dir / "libfsdpa.so", tmp_path / "build" / "libfsdpa.so",
                  tmp_path / "build" / "lib" / "libfsdpa.so",
                  tmp_path / "build-debug" / "libfsdpa.so"):
        assert f"\n  {where}" in message


def test_search_finds_a_build_directory(tmp_path):
    package_dir = tmp_path / "python" / "fsdpa"
    package_dir.mkdir(parents=True)
    (tmp_path / "build-release").mkdir()
    library = tmp_path / "build-release" / "libfsdpa.so"
    library.write_bytes(b"")
    assert _capi.find_library(environ={}, package_dir=package_dir) == library
    (tmp_path / "build").mkdir()
    preferred = tmp_path / "build" / "libfsdpa.so"
    preferred.write_bytes(b"")
    assert _capi.find_library(environ={}, package_dir=package_dir) == preferred


def test_import_does_not_load_and_first_call_explains(tmp_path):
    # In a fresh interpreter: importing works without a library; the first
    # call raises LibraryNotFound naming FSDPA_LIBRARY.
    code = (
        "import fsdpa\n"
        "try:\n"
        "    fsdpa.version()\n"
        "except fsdpa.LibraryNotFound as e:\n"
        "    print('LibraryNotFound:', e)\n"
    )
    env = dict(os.environ, FSDPA_LIBRARY=str(tmp_path / "missing.so"),
               PYTHONPATH=str(PACKAGE_DIR.parent), PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"LibraryNotFound: fsdpa: FSDPA_LIBRARY={tmp_path / 'missing.so'}" in result.stdout


def test_public_names():
    for name in fsdpa.__all__:
        assert hasattr(fsdpa, name)
