"""Builds libdcp.so from dcp.h, and the dcp-plan program from examples/dcp_plan.c, with the
system C compiler while the package is built, so that `pip install ./python` and `pip wheel
./python` need no `make` first. Both go into the package's _native/ folder (no __init__.py
there, so help(libdcp) lists no shared library as a submodule); the `dcp-plan` console script
and `python -m libdcp` execute that program (libdcp/_cli.py), so their output is the C CLI's.
Everything else is in pyproject.toml.

dcp.h and dcp_plan.c are taken from the repository (../dcp.h, ../examples/dcp_plan.c) or, in
an sdist, from beside this file (the sdist command copies them to dcp.h and c/dcp_plan.c,
whose `#include "../dcp.h"` then finds the header). The compiler is $CC, else the one Python
was built with, else `cc`. libdcp_cuda.so (the torch ops' kernels) needs nvcc and is not built
here: when `make build/libdcp_cuda.so` has left one in ../build (or $DCP_BUILD_DIR), it is
packaged too. The wheel holds native code that Python does not import, so it is tagged for the
platform but for any Python 3 (py3-none-PLATFORM)."""
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
NATIVE = "_native"  # the package's folder of native files (libdcp/_library.py's NATIVE_DIR)
HEADER = "dcp.h"
HEADER_PLACES = (os.path.join(HERE, "..", HEADER), os.path.join(HERE, HEADER))
CLI_SOURCE = "dcp_plan.c"
CLI_SDIST_DIR = "c"  # beside dcp.h in an sdist, so that dcp_plan.c's "../dcp.h" resolves
CLI_PLACES = (os.path.join(HERE, "..", "examples", CLI_SOURCE),
              os.path.join(HERE, CLI_SDIST_DIR, CLI_SOURCE))
BUILD = os.environ.get("DCP_BUILD_DIR", os.path.join(HERE, "..", "build"))
CPU_LIBRARY = "libdcp.so"
CUDA_LIBRARY = "libdcp_cuda.so"
CLI_PROGRAM = "dcp-plan"
# The Makefile's libdcp.so and dcp-plan rules without -Werror: a newer compiler's new warning
# must not stop an install.
C_FLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra"]
LIBRARY_FLAGS = ["-fPIC", "-shared", "-DDCP_IMPLEMENTATION"]


def find_source(name: str, places: tuple) -> str:
    for path in places:
        if os.path.isfile(path):
            return os.path.normpath(path)
    raise SystemExit(f"{name} not found (looked at {', '.join(places)}): build the package "
                     f"from the libdcp repository's python/ folder or from its sdist")


def c_compiler() -> list:
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def compile_c(what: str, arguments: list) -> None:
    command = c_compiler() + C_FLAGS + arguments + ["-lm"]
    print(" ".join(shlex.quote(part) for part in command))
    try:
        subprocess.run(command, check=True)
    except (OSError, subprocess.CalledProcessError) as failure:
        raise SystemExit(f"building {what} failed ({failure}); set CC to a C99 compiler"
                         ) from failure


def compile_library(header: str, target: str) -> None:
    compile_c(f"{CPU_LIBRARY} from {header}",
              LIBRARY_FLAGS + ["-x", "c", header, "-x", "none", "-o", target])


def compile_cli(source: str, target: str) -> None:
    """dcp-plan exactly as the Makefile builds build/dcp-plan (one C file that includes
    dcp.h's implementation), so the installed command prints what the C CLI prints."""
    compile_c(f"{CLI_PROGRAM} from {source}", [source, "-o", target])


class build_py_with_library(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install finds ../build itself
            return
        target = os.path.join(self.build_lib, PACKAGE, NATIVE)
        os.makedirs(target, exist_ok=True)
        compile_library(find_source(HEADER, HEADER_PLACES), os.path.join(target, CPU_LIBRARY))
        compile_cli(find_source(CLI_SOURCE, CLI_PLACES), os.path.join(target, CLI_PROGRAM))
        cuda = os.path.join(BUILD, CUDA_LIBRARY)
        if os.path.isfile(cuda):
            shutil.copy2(cuda, os.path.join(target, CUDA_LIBRARY))


class sdist_with_header(sdist):
    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        shutil.copy2(find_source(HEADER, HEADER_PLACES), os.path.join(base_dir, HEADER))
        os.makedirs(os.path.join(base_dir, CLI_SDIST_DIR), exist_ok=True)
        shutil.copy2(find_source(CLI_SOURCE, CLI_PLACES),
                     os.path.join(base_dir, CLI_SDIST_DIR, CLI_SOURCE))


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
