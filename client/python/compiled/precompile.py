"""The backend's part in torch's caching precompile: a warm start without
Dynamo's trace.

The graph memo (:mod:`compiled.graphmemo`) skips AOTAutograd on a warm
start, but Dynamo still traces the model's bytecode in every new process,
which is most of what is left. torch 2.13 can skip that too, for any
backend that can re-create its compiled callable from bytes: with
``torch._dynamo.config.caching_precompile = True`` (or
``TORCH_CACHING_PRECOMPILE=1``), ``torch.compiler.save_cache_artifacts()``
writes, for each compiled function, Dynamo's transformed bytecode, its
guards (serialized, not Python closures) and every backend's artifact into
``<TORCHINDUCTOR_CACHE_DIR>/dynamo/<sha256 of the function's name and
line>/entry``. A new process with the same setting loads that entry at
``torch.compile(...)``'s first call, calls each artifact's
``after_deserialization()`` to get the compiled callables, and installs the
bytecode behind the guards, as if it had traced: no trace, no backend call.
A call the guards refuse (another shape, dtype, grad mode) recompiles as
usual, through the backend.

What the backend provides is a ``BackendCacheArtifact`` recorded under
the name Dynamo gave the compiled function (``gm._backend_id``). Ours
holds no code: the graph memo's key of the Dynamo graph and the backend's
options (without the token). ``after_deserialization`` looks the memo up,
``Fetch``es the daemon's artifact by its key and loads it, exactly as the
backend's memo path does (:func:`compiled.dynamo._from_memo`); the native
code never goes through pickle. The backend records an artifact only for a
graph whose memo entry it has just written or used, so every recorded
artifact names a program the daemon held.

Staleness falls back to the full trace:

- torch checks the entry's torch version and the hashes of the sources
  Dynamo inlined (another model code gets a full trace);
- the backend's artifacts of an entry are loaded when torch reads the
  entry (:func:`install_hook` wraps ``DynamoCache.load``), and the entry is
  dropped, as if there were none (a full trace, one warning), when this
  client's sources differ from those of the process that saved it, when the
  memo has no entry for a key, or when the daemon cannot give a program
  (away, evicted, signature refused). torch 2.13 does fall back when an
  artifact's ``after_deserialization`` raises ``RuntimeError``, but its
  fallback then asserts "CompilePackage is already initialized"
  (eval_frame.py, ``_TorchDynamoContext.__call__``): the package was
  initialized before the backends were installed, so a failure must be found
  before that.

torch 2.13 names the globals it installs with a process-wide counter
(``torch._dynamo.bytecode_transformation.unique_id``) and does not move
it past the names a loaded entry installs, so the first recompile after a
load asserts "Name '__builtins_dict___0' already exists in scope". The
artifact carries the saving process's counter (read when the entry is
written) and ``after_deserialization`` moves this process's counter past
it.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Dict, Optional

import torch
from torch._dynamo.precompile_context import BackendCacheArtifact, PrecompileContext

__all__ = ["CompiledArtifact", "enabled", "record"]

_log = logging.getLogger("compiled")
FORMAT = 1


def enabled() -> bool:
    """Whether torch's caching precompile is on in this process."""
    return bool(getattr(torch._dynamo.config, "caching_precompile", False))


class _Counter:
    """Pickles as the value of torch's unique-name counter at the time the
    entry is written (after every graph of the saving process was named)."""

    def __reduce__(self):
        from torch._dynamo import bytecode_transformation as bt
        value = next(bt._unique_id_counter)
        bt._unique_id_counter = itertools.count(value + 1)
        return (int, (value,))

    def __deepcopy__(self, memo):
        return self


def _advance_counter(past: int) -> None:
    from torch._dynamo import bytecode_transformation as bt
    now = next(bt._unique_id_counter)
    bt._unique_id_counter = itertools.count(max(now, past + 1))


class CompiledArtifact(BackendCacheArtifact):
    """A Dynamo graph compiled by the ``compiled`` backend, as torch's
    precompile stores it: ``content`` is a dict (memo key, number of Dynamo
    inputs, source, options without the token, client digest, counter)."""

    def after_deserialization(self):
        fn = self.__dict__.pop("_loaded", None)
        return fn if fn is not None else self._load()

    def _load(self):
        from . import dynamo, graphmemo
        c = self.content
        if not isinstance(c, dict) or c.get("format") != FORMAT:
            raise RuntimeError("compiled precompile: an artifact of another format")
        _advance_counter(int(c["counter"]))
        if c["client"] != graphmemo._client_digest():
            raise RuntimeError("compiled precompile: saved by another version of the "
                               "compiled client (its Python sources differ)")
        backend = dynamo._Backend(dynamo.BackendOptions.parse(c["options"]))
        fn = dynamo._from_memo(backend, c["memo"], None, c["inputs"], c["source"])
        if fn is None:
            raise RuntimeError(f"compiled precompile: graph memo entry {c['memo'][:16]} "
                               "missing or its program not available from the daemon")
        _log.debug("compiled precompile: %s loaded without Dynamo's trace", self.key)
        return fn


def record(gm: torch.fx.GraphModule, memo: str, inputs: int, source: Optional[tuple],
           options: Optional[Dict[str, Any]]) -> None:
    """Records the artifact of a graph the backend just compiled or loaded
    through the graph memo, for ``torch.compiler.save_cache_artifacts()``."""
    from . import graphmemo
    backend_id = getattr(gm, "_backend_id", None)
    if backend_id is None or graphmemo.lookup(memo) is None:
        return
    options = {k: v for k, v in (options or {}).items() if k != "token"}
    PrecompileContext.record_artifact(CompiledArtifact(key=backend_id, content={
        "format": FORMAT, "memo": memo, "inputs": inputs, "source": source,
        "options": options, "client": graphmemo._client_digest(), "counter": _Counter()}))


def _checked_load(original):
    """``DynamoCache.load`` that also loads this backend's artifacts of the
    entry and drops the entry (None: a full trace) when one cannot be
    loaded."""
    import functools
    import warnings

    @functools.wraps(original)
    def load(fn):
        entry = original(fn)
        if entry is None:
            return None
        try:
            for artifact in entry.backends.values():
                if isinstance(artifact, CompiledArtifact):
                    artifact._loaded = artifact._load()
        except Exception as e:
            from torch._dynamo.utils import counters
            counters["dynamo_cache"]["compiled_stale"] += 1
            warnings.warn(f"compiled: the precompiled entry of {fn.__qualname__} is not "
                          f"used ({e}); Dynamo traces it again", stacklevel=2)
            return None
        return entry
    load._compiled_checked = True
    return load


def install_hook() -> None:
    """Wraps torch's ``DynamoCache.load`` (once per process) so that a stale
    entry of this backend falls back to the full trace."""
    from torch._dynamo import package
    cache = package.DynamoCache
    if not getattr(cache.load, "_compiled_checked", False):
        cache.load = _checked_load(cache.load)
