"""The compile target of this process: CPU features, -march level, libraries.

A compile request carries the target the code is built for
(``compiled_pb2.Target``: the architecture and the ISA features, plus
"blas" and "dnnl" when generated code may call the libraries this process
has loaded); the daemon builds for the best -march level those features
make up (compiler/target.c). ``COMPILED_TARGET`` caps the level, so that
the nodes of a cluster share artifacts. The native loader
(:mod:`compiled.native`) and packages (:mod:`compiled.package`) check an
artifact's level against this CPU with :data:`MARCH_FEATURES`.
"""

from __future__ import annotations

import ctypes
import os
import platform
from typing import Dict, List, Optional

__all__ = ["MARCH_FEATURES", "cpu_flags", "cpu_features", "has_blas", "has_dnnl",
           "target_level", "target_message"]

# CPU features each -march level needs (compiler/target.c).
MARCH_FEATURES = {
    "x86-64": set(),
    "x86-64-v2": {"sse4.2"},
    "x86-64-v3": {"sse4.2", "avx", "avx2", "fma", "bmi2"},
    "x86-64-v4": {"sse4.2", "avx", "avx2", "fma", "bmi2", "avx512f", "avx512bw",
                  "avx512vl", "avx512dq"},
}

# /proc/cpuinfo flag -> the feature name the daemon uses.
_CPUINFO_NAMES = {"sse4_2": "sse4.2", "avx": "avx", "avx2": "avx2", "fma": "fma",
                  "bmi2": "bmi2", "avx512f": "avx512f", "avx512bw": "avx512bw",
                  "avx512vl": "avx512vl", "avx512dq": "avx512dq"}


_cpu: Optional[List[str]] = None


def cpu_flags() -> List[str]:
    """This CPU's ISA features, named as the daemon names them."""
    global _cpu
    if _cpu is None:
        flags = set()
        try:
            with open("/proc/cpuinfo") as f:
                for line in f:
                    if line.startswith("flags"):
                        flags = set(line.split(":", 1)[1].split())
                        break
        except OSError:
            pass
        _cpu = [name for flag, name in _CPUINFO_NAMES.items() if flag in flags]
    return _cpu


def target_level() -> Optional[str]:
    """``COMPILED_TARGET``: the highest -march level to build for, or None
    (this CPU's best). A cluster whose nodes differ sets the level every
    node has, so that one artifact per graph serves them all (the level is
    part of the key). Only features this CPU has are ever reported, so a
    level above this CPU's changes nothing."""
    level = os.environ.get("COMPILED_TARGET", "").strip()
    if not level:
        return None
    if level not in MARCH_FEATURES:
        raise ValueError(f"COMPILED_TARGET={level!r} is not a target level; use one of "
                         f"{', '.join(MARCH_FEATURES)} (or leave it unset for this CPU's best)")
    return level


def cpu_features() -> List[str]:
    """The ISA features this process reports as its compile target: this
    CPU's, capped at ``COMPILED_TARGET`` when that is set."""
    level = target_level()
    if level is None:
        return cpu_flags()
    return [f for f in cpu_flags() if f in MARCH_FEATURES[level]]


_loaded_libs: Dict[str, bool] = {}


def _already_loaded(soname: str, symbol: Optional[str] = None) -> bool:
    """Whether this process has already loaded `soname` (and it exports
    `symbol`), without loading it; remembered per process."""
    key = f"{soname}:{symbol}"
    if key not in _loaded_libs:
        try:
            lib = ctypes.CDLL(soname, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
            _loaded_libs[key] = symbol is None or hasattr(lib, symbol)
        except OSError:
            _loaded_libs[key] = False
    return _loaded_libs[key]


def has_blas() -> bool:
    """Whether this process has the system BLAS (libblas.so.3) loaded, as
    Debian's torch has: generated code may then call it (a batched matrix
    product's items in parallel, docs/codegen.md). Reported in the target
    as the feature "blas"; a torch with its own BLAS (MKL) does not load
    it, and its programs make those products ATen calls."""
    return _already_loaded("libblas.so.3")


def has_dnnl() -> bool:
    """Whether this process has oneDNN 2 (libdnnl.so.2) loaded with its
    sgemm, as Debian's torch has (its convolutions): generated code may
    then make float32 matrix products through it on AVX-512 targets
    (docs/codegen.md, "Matrix products through oneDNN"). Reported in the
    target as the feature "dnnl"; a torch with oneDNN linked in statically
    (PyPI's) does not export it, and its products stay ATen calls, as
    with ``COMPILED_DNNL=0`` (eager's BLAS, and eager's bits)."""
    if os.environ.get("COMPILED_DNNL", "1").lower() in ("0", "false", "no"):
        return False
    return _already_loaded("libdnnl.so.2", "dnnl_sgemm")


def target_message():
    """The compile target of this process (arch, ISA features, "blas" when
    has_blas() and "dnnl" when has_dnnl())."""
    from .v1 import compiled_pb2  # the request messages, loaded on first compile
    isa = (cpu_features() + (["blas"] if has_blas() else []) +
           (["dnnl"] if has_dnnl() else []))
    return compiled_pb2.Target(arch=platform.machine(), isa=isa)
