"""Native code or the ATen program: chosen by measurement.

An artifact with native code holds two programs computing the same function
(the same inputs, the same outputs in the same layout, docs/artifact.md):
the native program (generated kernels between library calls) and the ATen
program (eager's operators, one call each). Native code is faster on most
graphs, but not on every shape: at batch 1 or 2 a network's kernels are
small and library calls dominate, and native code's fixed costs can
outweigh what fusion saves. So the runtime measures instead of guessing:

- the first calls of a program alternate between the two, ``ROUNDS`` of
  each after ``WARMUP`` untimed ones (every call computes the caller's
  result: nothing runs twice);
- the ATen program wins only when its median time is below ``MARGIN``
  times native's; then every later call runs the winner;
- the choice is recorded per artifact key and thread count in the per-user
  code cache (:mod:`compiled.codecache`), so the next process that loads
  the artifact runs the winner from its first call without measuring.

``$COMPILED_CHOOSE``: ``0`` always runs native code (no measurement),
``aten`` always the ATen program, ``measure`` measures even when a choice
is recorded. ``LoadedProgram.summary["runs"]`` says what runs:
``"native"``, ``"aten"`` (with ``summary["reason"]``: why), or
``"measuring"`` before the choice.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from typing import Callable, List, Optional

import torch

from . import codecache

__all__ = ["MARGIN", "ROUNDS", "WARMUP", "choose", "recorded"]

_log = logging.getLogger("compiled")

WARMUP = 1      # untimed calls of each program first (page-in, first touch)
ROUNDS = 3      # timed calls of each, alternating
MARGIN = 0.95   # the ATen program must be this much faster than native to win


def _record_path(key: str) -> Optional[str]:
    where = codecache.directory()
    if where is None or not key:
        return None
    return os.path.join(where, f"choice-{key[:32]}-t{torch.get_num_threads()}")


def recorded(key: str) -> Optional[str]:
    """"native" or "aten" when a process on this machine chose already."""
    path = _record_path(key)
    if path is None:
        return None
    try:
        with open(path, encoding="ascii") as f:
            choice = f.read(16).split()[0]
    except (OSError, IndexError, UnicodeDecodeError):
        return None
    return choice if choice in ("native", "aten") else None


def _record(key: str, choice: str, native_ms: float, aten_ms: float) -> None:
    path = _record_path(key)
    if path is None:
        return
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{choice} native {native_ms:.4f} ms aten {aten_ms:.4f} ms\n")
        os.replace(tmp, path)
    except OSError as e:
        _log.debug("compiled: cannot record the choice for %s: %s", key[:16], e)


def choose(key: str, native_fn: Callable, build_aten: Callable[[], Callable],
           summary: dict) -> Callable:
    """The function to call for a program with both forms: ``native_fn``,
    the ATen program (``build_aten()`` makes it, once, when needed), or a
    function that measures both on its first calls and then keeps the
    faster. ``summary["runs"]`` is kept up to date."""
    setting = os.environ.get("COMPILED_CHOOSE", "").strip().lower()
    if setting == "0":
        return native_fn
    if setting == "aten":
        reason = "COMPILED_CHOOSE=aten"
    else:
        choice = recorded(key) if setting != "measure" else None
        if choice == "native":
            return native_fn
        if choice != "aten":
            return _Trial(key, native_fn, build_aten, summary).call
        reason = "the ATen program measured faster here (recorded choice)"
    summary["runs"] = "aten"
    summary["reason"] = reason
    return build_aten()


class _Trial:
    """Alternates the two programs over the first calls, then runs the
    faster one."""

    def __init__(self, key: str, native_fn: Callable, build_aten: Callable[[], Callable],
                 summary: dict):
        self.key = key
        self.native = native_fn
        self.build_aten = build_aten
        self.aten: Optional[Callable] = None
        self.summary = summary
        summary["runs"] = "measuring"
        self.times: List[List[float]] = [[], []]   # native, aten
        self.calls = 0
        self.winner: Optional[Callable] = None

    def call(self, *args):
        winner = self.winner
        if winner is not None:
            return winner(*args)
        which = self.calls % 2
        self.calls += 1
        if which == 0:
            fn = self.native
        else:
            if self.aten is None:
                self.aten = self.build_aten()
            fn = self.aten
        start = time.perf_counter()
        out = fn(*args)
        elapsed = time.perf_counter() - start
        if self.calls > 2 * WARMUP:
            self.times[which].append(elapsed)
            if len(self.times[1]) == ROUNDS:
                self._decide()
        return out

    def _decide(self) -> None:
        native = statistics.median(self.times[0])
        aten = statistics.median(self.times[1])
        choice = "aten" if aten < MARGIN * native else "native"
        self.winner = self.aten if choice == "aten" else self.native
        self.summary["runs"] = choice
        if choice == "aten":
            self.summary["reason"] = "the ATen program measured faster here"
        self.summary["measured_ms"] = {"native": round(native * 1e3, 4),
                                       "aten": round(aten * 1e3, 4)}
        _log.info("compiled: program %s runs %s (native %.3f ms, ATen %.3f ms per call)",
                  self.key[:16], "the ATen program" if choice == "aten" else "native code",
                  native * 1e3, aten * 1e3)
        _record(self.key, choice, native * 1e3, aten * 1e3)
