"""The backend's graph memo: a warm start without AOTAutograd's trace.

A new process that runs ``torch.compile(model, backend="compiled")`` pays
for Dynamo's trace, then AOTAutograd's (functionalization, FakeTensor
propagation of every ATen operator), then the encoding of the ATen graph,
before the daemon's cache can answer. For a graph whose program the daemon
already holds, AOTAutograd's trace only recomputes what the last process on
this machine computed: which key the ATen graph has. The memo remembers it.

An entry maps the **Dynamo graph** (as Dynamo handed it to the backend,
with its example inputs' metadata and the state that shapes AOTAutograd's
trace) to the daemon's key of the ATen graph AOTAutograd made of it, and to
the artifact's signature when the client checks signatures. On a later
backend call with the same Dynamo graph, the backend fetches the artifact by
that key (``Fetch``; its digest, and its signature against the client's
trust keys, are checked as for a compile) and returns the program directly,
skipping AOTAutograd. When anything fails (no entry, the daemon no longer
holds the key, the daemon is away, the artifact does not load), the backend
takes the full path, which writes the entry again.

Only graphs whose AOTAutograd wrapping is the identity take part, so the
program can stand in for AOTAutograd's callable unchanged:

- inference graphs (no input requires grad, or grad mode is off), with
  autocast off;
- only plain strided tensors as inputs (no ``SymInt``, no subclass, no
  sparse or quantized tensors), every one a placeholder of the ATen graph
  (no inputs AOTAutograd deduplicated);
- no input mutated (in data or metadata), no output aliasing an input or
  another output, no effect tokens, no functionalized random state, no
  constants lifted out of the graph;
- every call in the Dynamo graph is to a function of torch, ``operator``,
  ``math`` or the builtins (a user function Dynamo kept as a call could
  change under the same name), no submodule calls; attributes the graph
  reads are tensors, hashed by value.

The memo key is the SHA-256 of: the memo format, the version of torch, the
client's own sources (another release or a local change of this package
traces differently), the backend options, the compile target, grad and inference
mode, the default dtype, the Dynamo graph (every node's operation, target
and arguments), each input's dtype, shape, strides, offset, device,
requires_grad and which inputs share storage.

Entries live in the client's code cache directory
(:mod:`compiled.codecache`: private to the user, written atomically, pruned
with it); ``COMPILED_CODE_CACHE=off`` turns the memo off with it, and so
does ``COMPILED_GRAPH_MEMO=0``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import operator
import os
from typing import Any, Dict, Optional, Sequence

import torch
import torch.fx

from . import codecache

__all__ = ["memo_key", "lookup", "remember", "eligible_metadata"]

FORMAT = 1
_PREFIX = "memo-"
_log = logging.getLogger("compiled.graphmemo")
_OFF = {"0", "off", "no", "false"}
_SAFE_MODULES = ("torch", "operator", "_operator", "math", "builtins")


class _Ineligible(Exception):
    pass


def enabled() -> bool:
    return (os.environ.get("COMPILED_GRAPH_MEMO", "1").strip().lower() not in _OFF
            and codecache.directory() is not None)


def memo_key(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
             context: Dict[str, Any]) -> Optional[str]:
    """The memo key of a Dynamo graph, or None when the graph cannot take
    part (see the module docstring; the reason is logged at debug level).
    ``context`` holds what else decides the ATen graph's key (options,
    target)."""
    if not enabled():
        return None
    try:
        return _key(gm, example_inputs, context)
    except _Ineligible as e:
        _log.debug("graph memo: not used for this graph: %s", e)
        return None


def _key(gm, example_inputs, context) -> str:
    if torch._C._is_any_autocast_enabled():
        raise _Ineligible("autocast is on")
    if dict(gm.named_parameters()) or dict(gm.named_buffers()):
        raise _Ineligible("the graph module holds parameters")
    grad = torch.is_grad_enabled()
    h = hashlib.sha256()

    def put(*parts):
        for p in parts:
            h.update(str(p).encode())
            h.update(b"\0")

    put("compiled graph memo", FORMAT, torch.__version__, _client_digest(),
        json.dumps(context, sort_keys=True, default=str), grad,
        torch.is_inference_mode_enabled(), torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled())
    storages: Dict[int, int] = {}
    needs_grad = False
    for i, x in enumerate(example_inputs):
        if type(x) not in (torch.Tensor, torch.nn.Parameter):
            raise _Ineligible(f"input {i} is a {type(x).__name__}")
        if x.layout != torch.strided or x.is_quantized or x.is_meta:
            raise _Ineligible(f"input {i} is not a plain strided tensor")
        needs_grad |= x.requires_grad
        ptr = x.untyped_storage().data_ptr()
        first = storages.setdefault(ptr, i) if x.untyped_storage().nbytes() else i
        put("input", i, x.dtype, tuple(x.shape), x.stride(), x.storage_offset(), x.device,
            x.requires_grad, first)
    if needs_grad and grad:
        raise _Ineligible("the graph needs grad (AOTAutograd makes a training graph)")
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if isinstance(value, torch.Tensor) and not all(
                type(d) is int for d in (*value.shape, *value.stride())):
            raise _Ineligible(f"{node.name} has symbolic sizes (a dynamic graph)")
        put(node.op, node.name, _target(gm, node), _canon(node.args), _canon(node.kwargs))
    return h.hexdigest()


_client = []


def _client_digest() -> str:
    """The SHA-256 of this client's Python sources: a client that traces or
    rewrites graphs differently (a new release, a local change) makes other
    ATen graphs of the same Dynamo graph, so it gets its own entries."""
    if not _client:
        h = hashlib.sha256()
        here = os.path.dirname(os.path.abspath(__file__))
        for name in sorted(os.listdir(here)):
            if name.endswith(".py"):
                with open(os.path.join(here, name), "rb") as f:
                    h.update(name.encode() + b"\0" + f.read())
        _client.append(h.hexdigest())
    return _client[0]


def _target(gm, node) -> str:
    if node.op in ("placeholder", "output", "call_method"):
        return str(node.target)
    if node.op == "get_attr":
        value = getattr(gm, node.target, None)
        if not isinstance(value, torch.Tensor) or type(value) not in (torch.Tensor,
                                                                        torch.nn.Parameter):
            raise _Ineligible(f"attribute {node.target} is not a plain tensor")
        t = value.detach().cpu().contiguous()
        digest = hashlib.sha256(t.view(torch.uint8).numpy().tobytes()
                                if t.numel() else b"").hexdigest()
        return f"{node.target}:{t.dtype}:{tuple(t.shape)}:{digest}"
    if node.op == "call_function":
        fn = node.target
        module = getattr(fn, "__module__", None) or ""
        if isinstance(fn, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            return str(fn)
        if module.split(".")[0] not in _SAFE_MODULES and fn not in (operator.getitem,):
            raise _Ineligible(f"a call to {module}.{getattr(fn, '__qualname__', fn)}")
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
        if name is None:
            raise _Ineligible(f"a call to {fn!r}")
        return f"{module}.{name}"
    raise _Ineligible(f"a {node.op} node ({node.target})")


def _canon(value) -> str:
    """A text for an argument that names everything the graph depends on,
    or _Ineligible."""
    if isinstance(value, torch.fx.Node):
        return "%" + value.name
    if isinstance(value, (list, tuple)):
        inner = ",".join(_canon(v) for v in value)
        return ("[" + inner + "]") if isinstance(value, list) else ("(" + inner + ")")
    if isinstance(value, dict):
        return "{" + ",".join(f"{k!r}:{_canon(v)}" for k, v in sorted(value.items())) + "}"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return value.hex() if math.isfinite(value) else repr(value)
    if isinstance(value, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(value)
    if isinstance(value, slice):
        return f"slice({_canon(value.start)},{_canon(value.stop)},{_canon(value.step)})"
    if value is Ellipsis:
        return "..."
    raise _Ineligible(f"an argument of type {type(value).__name__}")


def eligible_metadata() -> Optional[str]:
    """None when AOTAutograd's metadata of the graph being compiled (from
    its tracing context) makes its wrapping the identity; else why not."""
    try:
        from torch._guards import TracingContext
        context = TracingContext.try_get()
        meta = getattr(context, "fw_metadata", None) if context is not None else None
    except Exception as e:  # private torch API
        return f"no AOTAutograd metadata ({type(e).__name__})"
    if meta is None:
        return "no AOTAutograd metadata"
    for i, info in enumerate(meta.input_info):
        if info.mutates_data or info.mutates_metadata or info.mutates_storage_metadata:
            return f"input {i} is mutated"
    for i, info in enumerate(meta.output_info):
        if info.output_type.name != "non_alias":
            return f"output {i} is {info.output_type.name}"
    if meta.num_intermediate_bases or meta.tokens or meta.is_rng_op_functionalized \
            or getattr(meta, "num_graphsafe_rng_states", 0) or meta.subclass_inp_meta and any(
                not isinstance(m, int) and type(m).__name__ != "PlainTensorMeta"
                for m in meta.subclass_inp_meta):
        return "intermediate bases, effect tokens, random state or subclasses"
    return None


def _path(memo: str) -> Optional[str]:
    where = codecache.directory()
    return None if where is None else os.path.join(where, _PREFIX + memo)


def lookup(memo: str) -> Optional[Dict[str, Any]]:
    """The entry of ``memo``: {"key", "signature", "signature_key",
    "inputs", "outputs"}, or None."""
    path = _path(memo)
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            entry = json.loads(f.read())
        if entry.get("format") != FORMAT or entry.get("memo") != memo \
                or not isinstance(entry.get("key"), str):
            return None
        return entry
    except (OSError, ValueError):
        return None


def remember(memo: str, key: str, signature: str, signature_key: str, inputs: int,
             outputs: int) -> None:
    path = _path(memo)
    if path is None:
        return
    data = json.dumps({"format": FORMAT, "memo": memo, "key": key, "signature": signature,
                       "signature_key": signature_key, "inputs": inputs,
                       "outputs": outputs}).encode()
    codecache.store(path, data)
