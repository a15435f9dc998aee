"""Builds tartan._tartan against libtartan.

Where libtartan comes from, first match wins:
  1. TARTAN_BUILD_DIR=/path/to/autotools/build (what `make python` sets): the build
     tree's .libs/libtartan.so and the source tree's include/ (TARTAN_SRC_DIR, default
     this directory's parent);
  2. `pkg-config --cflags --libs tartan` (after `make install`; PKG_CONFIG_PATH if the
     prefix is not a standard one).
The extension is linked against the shared library with an rpath to its directory,
so it works without ldconfig or LD_LIBRARY_PATH.

TARTAN_EXTRA_CFLAGS / TARTAN_EXTRA_LDFLAGS (shell words) are added to the compile and
link commands: `make python` in a --enable-sanitizers build passes the library's
ASan + UBSan flags, so the extension is checked with it (`make python-check` there
preloads the ASan runtime).
"""
import os
import shlex
import subprocess

import numpy  # a build requirement: the result arrays are made with its C API
from setuptools import Extension, setup

here = os.path.dirname(os.path.abspath(__file__))


def from_build_tree(build):
    src = os.environ.get("TARTAN_SRC_DIR", os.path.dirname(here))
    libdir = os.path.join(os.path.abspath(build), ".libs")
    if not os.path.exists(os.path.join(libdir, "libtartan.so")):
        raise SystemExit(f"tartan: {libdir}/libtartan.so not found: run make in {build} first")
    return [os.path.join(src, "include")], [libdir], ["tartan"]


def from_pkg_config():
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs", "tartan"], check=True,
                             capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit("tartan: libtartan not found by pkg-config (install it with "
                         "`make install` from the source tree, set PKG_CONFIG_PATH, or "
                         "build with `make python` in the build directory): %s" % e)
    inc, libdirs, libs = [], [], []
    for w in shlex.split(out):
        if w.startswith("-I"):
            inc.append(w[2:])
        elif w.startswith("-L"):
            libdirs.append(w[2:])
        elif w.startswith("-l"):
            libs.append(w[2:])
    return inc, libdirs, libs or ["tartan"]


build = os.environ.get("TARTAN_BUILD_DIR")
include_dirs, library_dirs, libraries = from_build_tree(build) if build else from_pkg_config()
extra_cflags = shlex.split(os.environ.get("TARTAN_EXTRA_CFLAGS", ""))
extra_ldflags = shlex.split(os.environ.get("TARTAN_EXTRA_LDFLAGS", ""))

setup(ext_modules=[Extension(
    "tartan._tartan",
    sources=["src/_tartan.c"],
    include_dirs=include_dirs + [numpy.get_include()],
    library_dirs=library_dirs,
    runtime_library_dirs=library_dirs,
    libraries=libraries,
    extra_compile_args=["-std=c11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
                        "-Wno-missing-field-initializers", "-Wno-cast-function-type"] + extra_cflags,
    extra_link_args=["-pthread"] + extra_ldflags,
)])
