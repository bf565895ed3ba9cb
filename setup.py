"""setuptools glue for pyproject.toml: builds libfsdpa.so with CMake and puts
it in the package (fsdpa/lib/), so that `import fsdpa` finds it with no
variable set; beside it the compiled torch binding, where this Python has
torch (with --no-build-isolation, the environment's torch). CMake arguments: FSDPA_CMAKE_ARGS (e.g. "-DFSDPA_CUDA=OFF" or
"-DFSDPA_HEAD_DIMS=64;128"), as for scripts/build.sh."""

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(fsdpa VERSION ([0-9.]+)", text).group(1)


class BuildWithLibrary(build_py):
    """build_py that first builds the `fsdpa` shared-library target."""

    def run(self):
        super().run()
        build_dir = ROOT / "build-pip"  # ignored by git, like every build*/
        configure = ["cmake", "-S", str(ROOT), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                     "-DFSDPA_BUILD_TESTS=OFF", "-DFSDPA_BUILD_TOOLS=OFF",
                     "-DFSDPA_BUILD_BENCH=OFF", f"-DFSDPA_TORCH_PYTHON={sys.executable}"]
        configure += shlex.split(os.environ.get("FSDPA_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        jobs = ["-j", str(os.cpu_count() or 1)]
        subprocess.check_call(["cmake", "--build", str(build_dir), "--target", "fsdpa", *jobs])
        library = (build_dir / "libfsdpa.so").resolve()  # the versioned file itself
        destination = Path(self.build_lib) / "fsdpa" / "lib"
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, destination / "libfsdpa.so")
        # The torch binding where CMake configured it (torch_binding.txt
        # names it). Under the default FSDPA_TORCH_EXTENSION=AUTO a binding
        # that does not compile (a torch whose headers changed) leaves the
        # wheel with the library alone, whose Python path serves torch too.
        marker = build_dir / "torch_binding.txt"
        if not marker.is_file():
            return
        binding = build_dir / marker.read_text().strip()
        binding.unlink(missing_ok=True)  # an earlier build's
        built = subprocess.call(["cmake", "--build", str(build_dir), "--target",
                                 "fsdpa_torch_native", *jobs])
        if built != 0:
            if "-DFSDPA_TORCH_EXTENSION=ON" in configure:
                raise subprocess.CalledProcessError(built, "fsdpa_torch_native")
            print("fsdpa: the torch binding did not build; the wheel carries the library alone",
                  file=sys.stderr)
            return
        shutil.copyfile(binding, destination / binding.name)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(version=version(), cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
