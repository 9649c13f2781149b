"""What a slow compile shows while the caller waits.

A cache hit answers in a millisecond and shows nothing. A compile that is
still running after :data:`DELAY` seconds (densenet121's cold compile takes
several) shows one status line on the terminal (standard error, when it is
one), redrawn in place with the daemon's current stage and the time spent::

    compiled: DenseNet on 127.0.0.1:7421: compile (emit) 4.2 s

and a last line when it ends (``... compiled in 7.4 s``). Off a terminal
the same facts go to the ``compiled`` logger at INFO, once, when the
compile ends. ``$COMPILED_PROGRESS``: ``0`` never draws the line, ``1``
draws it even when standard error is not a terminal.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Optional

__all__ = ["DELAY", "Progress"]

_log = logging.getLogger("compiled")

DELAY = 1.5      # seconds before anything is shown
_REDRAW = 0.25   # seconds between redraws of the line


def _enabled(stream) -> bool:
    setting = os.environ.get("COMPILED_PROGRESS", "")
    if setting in ("0", "1"):
        return setting == "1"
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Progress:
    """A context manager around one compile request; :meth:`event` takes
    the daemon's ``CompileEvent`` messages as they come."""

    def __init__(self, label: str, address: str, stream=None):
        self.label = label
        self.address = address
        self.stream = stream if stream is not None else sys.stderr
        self.stage = "waiting for the daemon"
        self.start = 0.0
        self.shown = False          # the line was drawn at least once
        self._done = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._width = 0

    def __enter__(self) -> "Progress":
        self.start = time.monotonic()
        return self

    def event(self, event) -> None:
        # A hit answers with its result alone: the line's thread starts
        # with the first other event (a compile or a queue), never for hits.
        if self._thread is None and _enabled(self.stream):
            self._thread = threading.Thread(target=self._run, name="compiled-progress",
                                            daemon=True)
            self._thread.start()
        kind = event.WhichOneof("event")
        if kind == "queued":
            self.stage = f"queued (position {event.queued.position})"
        elif kind == "stage":
            name = event.stage.name
            if name == "compile":
                self.stage = "compile" if not event.stage.done else "finishing"
            elif not event.stage.done:
                self.stage = f"compile ({name})"
            elif name == "receive":
                self.stage = "received"

    def _line(self, text: str) -> None:
        pad = " " * max(0, self._width - len(text))
        self.stream.write("\r" + text + pad)
        self.stream.flush()
        self._width = len(text)

    def _run(self) -> None:
        if self._done.wait(max(0.0, self.start + DELAY - time.monotonic())):
            return
        while not self._done.is_set():
            elapsed = time.monotonic() - self.start
            try:
                self._line(f"compiled: {self.label} on {self.address}: {self.stage} "
                           f"{elapsed:.1f} s")
                self.shown = True
            except (OSError, ValueError):  # the stream went away
                return
            self._done.wait(_REDRAW)

    def __exit__(self, exc_type, exc, tb) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        elapsed = time.monotonic() - self.start
        outcome = "compiled" if exc_type is None else f"failed ({exc_type.__name__})"
        if self.shown:
            try:
                self._line(f"compiled: {self.label} on {self.address}: {outcome} in "
                           f"{elapsed:.1f} s")
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass
        elif elapsed >= DELAY:
            _log.info("compiled: %s on %s: %s in %.1f s", self.label, self.address,
                      outcome, elapsed)
