"""Copies the libraries `make` built (../build/libdcp.so, and ../build/libdcp_cuda.so when it
exists) into the package, so that an installed dcp finds them next to itself. Everything else
is in pyproject.toml."""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("DCP_BUILD_DIR", os.path.join(HERE, "..", "build"))
LIBRARIES = (("libdcp.so", True), ("libdcp_cuda.so", False))  # (name, required)


class build_py_with_libraries(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install finds ../build itself
            return
        target = os.path.join(self.build_lib, "dcp")
        for name, required in LIBRARIES:
            source = os.path.join(BUILD, name)
            if os.path.isfile(source):
                shutil.copy2(source, os.path.join(target, name))
            elif required:
                raise SystemExit(f"{source} is missing: run `make build/{name}` in the libdcp "
                                 f"repository first (or set DCP_BUILD_DIR)")


setup(cmdclass={"build_py": build_py_with_libraries})
