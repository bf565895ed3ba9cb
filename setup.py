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
import sysconfig
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
        binding = build_dir / ("_torch_native" + sysconfig.get_config_var("EXT_SUFFIX"))
        binding.unlink(missing_ok=True)  # an earlier build's, perhaps for another torch
        subprocess.check_call(configure)
        # The default target: the library (shared and static) and the torch
        # binding where CMake configured it.
        subprocess.check_call(["cmake", "--build", str(build_dir), "-j", str(os.cpu_count() or 1)])
        library = (build_dir / "libfsdpa.so").resolve()  # the versioned file itself
        destination = Path(self.build_lib) / "fsdpa" / "lib"
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, destination / "libfsdpa.so")
        if binding.is_file():
            shutil.copyfile(binding, destination / binding.name)


class BinaryDistribution(Distribution):
    """The wheel carries a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(version=version(), cmdclass={"build_py": BuildWithLibrary}, distclass=BinaryDistribution)
