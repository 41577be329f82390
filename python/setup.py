"""Builds libdcp.so from dcp.h with the system C compiler while the package is built, so that
`pip install ./python` and `pip wheel ./python` need no `make` first. Everything else is in
pyproject.toml.

dcp.h is taken from the repository (../dcp.h) or, in an sdist, from beside this file (the
sdist command copies it there). The compiler is $CC, else the one Python was built with, else
`cc`. libdcp_cuda.so (the torch ops' kernels) needs nvcc and is not built here: when
`make build/libdcp_cuda.so` has left one in ../build (or $DCP_BUILD_DIR), it is packaged too.
The wheel holds a native library that Python does not import, so it is tagged for the platform
but for any Python 3 (py3-none-PLATFORM)."""
import os
import shlex
import shutil
import subprocess
import sysconfig

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

try:  # setuptools >= 70.1 ships bdist_wheel; older ones take it from the wheel package
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "libdcp"
HEADER = "dcp.h"
HEADER_PLACES = (os.path.join(HERE, "..", HEADER), os.path.join(HERE, HEADER))
BUILD = os.environ.get("DCP_BUILD_DIR", os.path.join(HERE, "..", "build"))
CPU_LIBRARY = "libdcp.so"
CUDA_LIBRARY = "libdcp_cuda.so"
# The Makefile's libdcp.so rule without -Werror: a newer compiler's new warning must not stop
# an install.
C_FLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra", "-fPIC", "-shared", "-DDCP_IMPLEMENTATION"]


def find_header() -> str:
    for path in HEADER_PLACES:
        if os.path.isfile(path):
            return os.path.normpath(path)
    raise SystemExit(f"{HEADER} not found (looked at {', '.join(HEADER_PLACES)}): build the "
                     f"package from the libdcp repository's python/ folder or from its sdist")


def c_compiler() -> list:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def compile_library(header: str, target: str) -> None:
    command = c_compiler() + C_FLAGS + ["-x", "c", header, "-x", "none", "-o", target, "-lm"]
    print(" ".join(shlex.quote(part) for part in command))
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as failure:
        raise SystemExit(f"building {CPU_LIBRARY} from {header} failed ({failure}); set CC to "
                         f"a C99 compiler") from failure


class build_py_with_library(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install finds ../build itself
            return
        target = os.path.join(self.build_lib, PACKAGE)
        compile_library(find_header(), os.path.join(target, CPU_LIBRARY))
        cuda = os.path.join(BUILD, CUDA_LIBRARY)
        if os.path.isfile(cuda):
            shutil.copy2(cuda, os.path.join(target, CUDA_LIBRARY))


class sdist_with_header(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        shutil.copy2(find_header(), os.path.join(base_dir, HEADER))


class NativeDistribution(Distribution):
    """Holds a native library: the wheel is platform-specific and installs into platlib."""

    def has_ext_modules(self):
        return True


class bdist_wheel_native(bdist_wheel):
    def get_tag(self):
        return ("py3", "none", super().get_tag()[2])


setup(distclass=NativeDistribution,
      cmdclass={"build_py": build_py_with_library, "sdist": sdist_with_header,
                "bdist_wheel": bdist_wheel_native})
