"""compiled as a ``torch.compile`` backend.

How the work is divided (docs/torch2.md has the whole story):

- **Dynamo** (in the user's process) turns Python bytecode into FX graphs,
  installs guards, breaks graphs where it must and decides recompiles.
  ``compiled`` is one more backend; it never reimplements guards.
- **AOTAutograd** (in the user's process) turns each Dynamo graph into
  ATen-level graphs: functional, with a forward and a backward graph when
  the graph needs grad (partitioned by the min-cut partitioner, as for
  Inductor), and wraps the compiled graphs in runtime wrappers that apply
  input mutations and rebuild aliased outputs.
- **This module** is the compiler AOTAutograd calls for each of those ATen
  graphs: it encodes the graph (metadata from the FakeTensors AOTAutograd
  attached to every node) into the wire format, asks the daemon for the
  artifact (a cache hit, or one compile for the whole cluster), and loads
  it with :mod:`compiled.runtime`. Forward and backward are separate
  programs under separate keys.
- **The daemon** canonicalizes, keys, lowers to native code and caches, as
  for graphs from any other client.
- **The graph memo** (:mod:`compiled.graphmemo`) lets a new process skip
  AOTAutograd for an inference graph whose program the daemon holds: it
  maps the Dynamo graph to the key of the ATen graph AOTAutograd made of it
  in an earlier process.

Dynamic shapes (docs/dynamic-shapes.md): a graph whose sizes are symbols
(``dynamic=True``, ``mark_dynamic``, automatic dynamic) is sent as it is and
compiles to one program with size symbols; a call its guards refuse gets a
static program traced for its sizes (``_GraphFunction._specialized``).

Failures: when the daemon cannot be reached or fails for any reason but the
graph, or when a graph holds something the wire format cannot carry (a
higher-order operator, a SymFloat), the graph runs as AOTAutograd's
own ATen graph, eagerly, with one warning; a graph that could not be
compiled because the daemon was away is compiled again on a later call,
once the daemon answers. Only a graph the daemon refuses as invalid raises
:class:`compiled.CompileError`.

Options (``torch.compile(m, backend="compiled", options={...})``, each also
an environment variable):

========================  ==========================  ==========================
option                    environment                 meaning
========================  ==========================  ==========================
``server``                ``COMPILED_SERVER``         the daemon's ``host:port``
``token``                 ``COMPILED_TOKEN``          bearer token
``native``                ``COMPILED_NATIVE``         False: ATen programs only
``opt_level``             --                          0-3 or "O0"-"O3"
``eager_random``          ``COMPILED_EAGER_RANDOM``   eager's random numbers
``timeout``               --                          seconds for one compile
========================  ==========================  ==========================
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import logging
import operator
import os
import sys
import threading
import time
import warnings
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.fx

from . import CaptureError
from . import encode as _encode
from . import target as _target
from .errors import (ArtifactWarning, CompileError, CompileFallbackWarning, DaemonError,
                     DaemonUnavailableWarning, GuardFailure)

__all__ = ["BackendOptions", "compiled_backend", "encode_graph", "loaded_graphs"]


def _install_precompile_hook() -> None:
    # torch.compile resolves the backend (importing this module) before it
    # reads a precompiled entry: the check of this backend's entries must be
    # in place by then (compiled.precompile)
    try:
        from . import precompile
        precompile.install_hook()
    except Exception as e:   # a torch without caching precompile
        logging.getLogger("compiled").debug("compiled precompile: not available: %s", e)


_install_precompile_hook()

_log = logging.getLogger("compiled")
_capture = sys.modules["compiled.capture"]


@dataclasses.dataclass(frozen=True)
class BackendOptions:
    """The backend's options, from ``torch.compile(..., options=...)`` and
    the environment."""
    server: Optional[str] = None
    token: Optional[str] = None
    native: bool = True
    opt_level: int = 0
    eager_random: bool = False
    timeout: float = 600.0

    @classmethod
    def parse(cls, options: Optional[Dict[str, Any]]) -> "BackendOptions":
        from .frontend import _eager_random, _opt_level
        options = dict(options or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise ValueError(f"compiled backend: unknown option(s) {', '.join(unknown)} "
                             f"(known: {', '.join(sorted(known))})")
        native = options.get("native")
        if native is None:
            native = os.environ.get("COMPILED_NATIVE", "1") != "0"
        timeout = float(options.get("timeout", 600.0))
        if not timeout > 0:
            raise ValueError(f"compiled backend: timeout must be positive, got {timeout}")
        return cls(server=options.get("server"), token=options.get("token"),
                   native=bool(native), opt_level=_opt_level(options.get("opt_level")),
                   eager_random=_eager_random(options.get("eager_random")), timeout=timeout)


class _Backend:
    """One ``torch.compile`` call's backend state: its client, its options,
    whether it warned already."""

    def __init__(self, options: BackendOptions):
        from . import client as client_module
        self.options = options
        if options.token is not None:
            self.client = client_module.Client(options.server, token=options.token,
                                               timeout=options.timeout)
        else:
            self.client = client_module.get_client(options.server)
        self.warned = False
        self.lock = threading.Lock()
        self.programs: List[Any] = []   # LoadedPrograms, oldest first (debugging)

    def memo_context(self) -> Dict[str, Any]:
        """What decides the daemon's key of this backend's graphs besides
        the graph (:mod:`compiled.graphmemo`)."""
        o = self.options
        return {"native": o.native, "opt_level": o.opt_level, "eager_random": o.eager_random,
                "target": _target.target_message().SerializeToString().hex()}

    def warn(self, category, message: str) -> None:
        with self.lock:
            if self.warned:
                _log.info("compiled backend: %s", message)
                return
            self.warned = True
        warnings.warn(f"compiled: {message}", category, stacklevel=2)


from .symbolic import Unencodable, is_symbolic as _is_symbolic  # noqa: E402


def encode_graph(gm: torch.fx.GraphModule, where: str,
                 input_kinds: Optional[Sequence[int]] = None) -> "tuple[bytes, list]":
    """The wire bytes of an AOTAutograd ATen graph and the values of its
    CONSTANT inputs (its ``get_attr`` tensors), in input order.

    Every placeholder becomes a USER_INPUT in placeholder order; metadata
    comes from ``node.meta["val"]`` (FakeTensors), read as each value is
    produced, so a later in-place change cannot alter it. Values are
    described as not requiring grad: AOTAutograd runs compiled graphs
    with grad off. ``input_kinds``: each placeholder's InputKind (default:
    all USER_INPUT).

    A symbolic graph (dynamic shapes: SymInt sizes, SymInt placeholders,
    ``aten::sym_size`` and SymInt arithmetic) is sent as it is: sizes as
    expressions with their example values as hints (compiled.symbolic),
    SymInt placeholders as SymInt inputs, which the program takes at call
    time. Raises Unencodable for what the wire format cannot carry
    (SymFloat and SymBool values, sizes no expression of its grammar
    states), higher-order operators and nodes without metadata.
    """
    from .symbolic import set_symint, sym_meta, SYM_OPERATORS
    from .v1 import graph_pb2
    graph = gm.graph
    cache: Dict[tuple, Any] = {}
    sym_values: Dict[torch.fx.Node, Any] = {}

    def sym_value(node, val):
        msg = graph_pb2.SymInt()
        set_symint(msg, val, f"{where}: node '{node.name}'")
        sym_values[node] = msg

    def meta_of(t: torch.Tensor, what: str):
        if _is_symbolic(t):
            return sym_meta(t, f"{where}: {what}")
        key = (t.dtype, tuple(t.shape), t.stride(), t.storage_offset())
        meta = cache.get(key)
        if meta is None:
            meta = _encode.tensor_meta(t, f"{where}: {what}")
            meta.requires_grad = False
            cache[key] = meta
        return meta

    metas: Dict[tuple, Any] = {}
    inputs = []
    attr_nodes: Dict[torch.fx.Node, str] = {}
    constants: Dict[str, torch.Tensor] = {}
    names = _encode.ValueNames()
    user_inputs = []
    n_placeholders = 0
    for node in graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor):
                metas[(node,)] = meta_of(val, f"input {node.name}")
            elif isinstance(val, torch.SymInt):
                sym_value(node, val)
            elif val is None or _is_symbolic(val) or not isinstance(val, (int, float, bool)):
                raise Unencodable(f"{where}: input {node.name} is a "
                                  f"{type(val).__name__}, not a tensor")
            kind = _capture.graph_pb2.INPUT_KIND_USER_INPUT
            if input_kinds is not None:
                kind = input_kinds[n_placeholders]
            n_placeholders += 1
            user_inputs.append(_encode.GraphInput(kind, val, node.name, "", False, node))
        elif node.op == "get_attr":
            value = _capture._fetch_attr(gm, node.target)
            if isinstance(value, torch.fx.GraphModule):
                users = ", ".join(sorted({str(u.target) for u in node.users}))
                raise Unencodable(f"{where}: a higher-order operator ({users}) calls the "
                                  f"subgraph {node.target}; the wire format has no subgraphs")
            if not isinstance(value, torch.Tensor):
                raise Unencodable(f"{where}: attribute {node.target} is not a tensor")
            if node.target not in constants:
                constants[node.target] = value
                inputs.append(_encode.GraphInput(_capture.graph_pb2.INPUT_KIND_CONSTANT, value, "",
                                                 node.target, False, node))
                metas[(node,)] = meta_of(value, f"constant {node.target}")
            attr_nodes[node] = node.target
        elif node.op == "call_function":
            target = node.target
            val = node.meta.get("val")
            if target.__class__ is not torch._ops.OpOverload:
                if target is operator.getitem:
                    continue
                if target in SYM_OPERATORS and isinstance(val, torch.SymInt):
                    sym_value(node, val)
                    continue
                raise Unencodable(f"{where}: node '{node.name}' calls {target}, "
                                  "not an ATen operator")
            if isinstance(val, torch.SymInt):  # aten::sym_size.int, sym_numel...
                sym_value(node, val)
            elif isinstance(val, (torch.SymFloat, torch.SymBool)):
                raise Unencodable(f"{where}: node '{node.name}' ({target}) makes a "
                                  f"{type(val).__name__}, which the wire format cannot carry")
            elif isinstance(val, torch.Tensor):
                metas[(node,)] = meta_of(val, f"node '{node.name}'")
            elif isinstance(val, (list, tuple)):
                for i, v in enumerate(val):
                    if isinstance(v, torch.Tensor):
                        metas[(node, i)] = meta_of(v, f"node '{node.name}' output {i}")
                    elif v is not None:
                        raise Unencodable(f"{where}: node '{node.name}' output {i} is a "
                                          f"{type(v).__name__}")
            elif val is not None:
                raise Unencodable(f"{where}: node '{node.name}' ({target}) returns a "
                                  f"{type(val).__name__}")
            elif node.target._schema.returns and "val" not in node.meta:
                raise Unencodable(f"{where}: node '{node.name}' has no metadata")
            _annotate(node)
        elif node.op not in ("output",):
            raise Unencodable(f"{where}: node '{node.name}' is a {node.op} node")
    # Constants first, as capture orders them (parameters and buffers have
    # no place here: AOTAutograd passes them as graph inputs).
    all_inputs = inputs + user_inputs
    for inp in all_inputs:
        inp.name = names.take(inp.target.replace(".", "_") if inp.target else inp.name)
    data = _encode.encode_graph_module(graph, all_inputs, attr_nodes, metas, names,
                                       find_storage_groups=False, sym_values=sym_values)
    return data, list(constants.values())


def _annotate(node: torch.fx.Node) -> None:
    """Stack trace and module path for the daemon's diagnostics, from what
    Dynamo recorded (never part of the key)."""
    meta = node.meta
    if _encode.NODE_META_STACK not in meta:
        stack = meta.get("stack_trace")
        if stack:
            meta[_encode.NODE_META_STACK] = stack.rstrip()
    if _encode.NODE_META_MODULE not in meta:
        stack = meta.get("nn_module_stack")
        if stack:
            path = list(stack.values())[-1]
            if isinstance(path, tuple):
                path = path[0]
            meta[_encode.NODE_META_MODULE] = str(path)


class _GraphFunction:
    """A compiled ATen graph, in AOTAutograd's boxed convention (one list of
    inputs, which the callee empties). Runs the daemon's program; while
    none is loaded (the daemon was away), runs the ATen graph eagerly and
    tries the daemon again after a delay that doubles up to a cap, as
    :func:`compiled.compile` does (frontend.RETRY_FIRST, RETRY_MAX)."""

    def __init__(self, backend: _Backend, gm: torch.fx.GraphModule, role: str, where: str,
                 entry_label=None):
        # an instance attribute: AOTAutograd wraps the backward in
        # torch._dynamo.disable, whose functools.wraps copies __dict__ only
        self._boxed_call = True
        self.backend = backend
        self.gm = gm
        self.role = role
        self.where = where
        self.entry_label = entry_label  # for the cache entry (compiled.labels)
        self.data: Optional[bytes] = None
        self.constants: list = []
        self.fn: Optional[Callable] = None
        self.program = None
        self.key: Optional[str] = None
        self.signature = ("", "")
        self.retry_at = 0.0
        self.delay = None   # after a failure: the wait before the next try
        self.eager = gm.forward if gm is not None else None  # None: precompiled
        self.serial = next(_SERIAL)
        # a symbolic graph's program refused a call (compiled.GuardFailure):
        # programs specialized to the sizes of such calls, by signature
        self.specialized: Dict[tuple, Callable] = {}
        self.compiles = 0   # programs fetched from the daemon
        _LOADED.add(self)

    def __call__(self, args: list):
        fn = self.fn
        if fn is not None:
            try:
                return fn(args)
            except GuardFailure as e:  # the list is whole: run it another way
                return self._specialized(args, e)
        if time.monotonic() >= self.retry_at and self.data is not None:
            if self.compile():
                return self(args)
        inputs = list(args)
        args.clear()
        return self.eager(*inputs)

    def _specialized(self, args: list, failure: GuardFailure):
        """A call the symbolic graph's program refused (one of its guards is
        false at these sizes: an empty reduction, a dimension that
        broadcasts...): the graph traced again at these inputs' sizes, a
        static program compiled once per signature (a new compile, not a
        failure); ATen calls if that fails too."""
        sig = tuple((a.dtype, tuple(a.shape), a.stride(), a.storage_offset())
                    if isinstance(a, torch.Tensor) else (type(a), a) for a in args)
        fn = self.specialized.get(sig)
        if fn is None:
            _log.debug("compiled backend: %s: %s; compiling it for these sizes",
                       self.where, failure)
            fn = self._compile_static(list(args))
            self.specialized[sig] = fn
        return fn(args)

    def _compile_static(self, inputs: list) -> Callable:
        from torch.fx.experimental.proxy_tensor import make_fx
        where = f"{self.where} (specialized)"
        eager = self.eager

        def run_eager(args):
            xs = list(args)
            args.clear()
            return eager(*xs)
        try:
            gm = make_fx(self.gm, tracing_mode="fake")(*inputs)
            for node, value in zip((n for n in gm.graph.nodes if n.op == "placeholder"), inputs):
                if not isinstance(value, torch.Tensor):  # a SymInt's value: a literal now
                    node.meta["val"] = value
            data, constants = encode_graph(gm, where)
        except Exception as e:
            self.backend.warn(CompileFallbackWarning, f"{where}: {e}; running it as ATen calls")
            return run_eager
        program = self._fetch(data, constants, where)
        return program.fn if program is not None else run_eager

    def compile(self) -> bool:
        """Ask the daemon for the program and load it. False (and eager
        until the retry) when the daemon failed for a reason other than
        the graph; raises CompileError when it refused the graph."""
        program = self._fetch(self.data, self.constants, self.where)
        if program is None:
            return False
        self.program = program
        self.fn = program.fn
        return True

    def _fetch(self, data: bytes, constants: list, where: str):
        """The loaded program of ``data`` from the daemon, or None (see
        compile)."""
        from . import runtime
        from .v1 import compiled_pb2
        b = self.backend
        opts = b.options
        options = compiled_pb2.CompileOptions(
            opt_level=opts.opt_level, return_input_mutations=False,
            mode=compiled_pb2.MODE_INFERENCE, separate_temporaries=self.role != "inference",
            eager_random=opts.eager_random)
        try:
            outcome = b.client.compile_outcome(data, options, target=_target.target_message(),
                                               timeout=opts.timeout, label=where,
                                               entry_label=self.entry_label)
            key, artifact = outcome.key, outcome.artifact
        except CompileError:
            raise
        except DaemonError as e:
            b.warn(DaemonUnavailableWarning,
                   f"{e}; running {where} as ATen calls (daemon {b.client.address}). "
                   "Compiling will be retried later.")
            from .frontend import RETRY_FIRST, RETRY_MAX   # compile()'s delays
            self.delay = RETRY_FIRST if self.delay is None else min(self.delay * 2, RETRY_MAX)
            self.retry_at = time.monotonic() + self.delay
            return None
        self.compiles += 1
        try:
            # AOTAutograd calls its compilers with its FakeTensorMode active:
            # the program's arenas must be real memory
            from torch.utils._python_dispatch import _disable_current_modes
            with _capture.paused_gc(), _disable_current_modes():
                program = runtime.load(artifact, constants=constants, boxed=True,
                                       native=opts.native,
                                       recycle_outputs=self.role == "inference")
        except Exception as e:  # whatever the artifact holds, user code never sees it
            _log.warning("compiled backend: the artifact %s for %s could not be loaded: %s: %s",
                         key, where, type(e).__name__, e)
            b.warn(ArtifactWarning, f"the daemon's artifact {key[:16]} for {where} could "
                   f"not be loaded ({type(e).__name__}: {e}); running it as ATen calls. "
                   f"`compilectl evict {key[:16]}` removes it from the cache.")
            if data is self.data:
                self.data = None  # never again for this graph
            return None
        b.programs.append(program)
        _log.debug("compiled backend: %s -> program %s", where, key[:16])
        if data is self.data:   # the graph's own program (the graph memo's entry names it)
            self.key = key
            self.signature = (outcome.result.signature, outcome.result.signature_key)
        return program


_SERIAL = itertools.count()
_LOADED: "weakref.WeakSet[_GraphFunction]" = weakref.WeakSet()


def _compile_graph(backend: _Backend, source: Optional[tuple], role: str,
                   gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                   memo: Optional[tuple] = None) -> _GraphFunction:
    """AOTAutograd's fw_compiler / bw_compiler / inference_compiler.
    ``source`` is (name, file, line) of the frame Dynamo compiled, or None;
    ``memo`` (inference only) is (graph memo key, number of Dynamo inputs)
    when the Dynamo graph may take part in the memo (:mod:`compiled.graphmemo`)."""
    if role == "inference":
        _attention_to_flash(gm)
    fn = _GraphFunction(backend, gm, role, *_names(source, gm, role))
    try:
        fn.data, fn.constants = encode_graph(gm, fn.where)
    except CaptureError as e:
        backend.warn(CompileFallbackWarning, f"{e}; running it as ATen calls")
        return fn
    if fn.compile() and memo is not None:
        _remember(fn, gm, *memo)
    return fn


def _names(source: Optional[tuple], gm: torch.fx.GraphModule, role: str) -> tuple:
    """(where, entry label) of a graph: its text in messages and the label
    of its cache entry."""
    from .labels import make_label
    name, file, line = source or (_graph_label(gm) if gm is not None else "a graph", "", 0)
    label = make_label(name if role == "inference" else f"{name} ({role})", file, line)
    return f"the {role} graph of {name}", label


def _remember(fn: _GraphFunction, gm: torch.fx.GraphModule, memo: str, inputs: int) -> None:
    """Writes the graph memo's entry for an inference graph just compiled,
    when AOTAutograd's wrapping of it is the identity."""
    from . import graphmemo
    placeholders = sum(1 for n in gm.graph.nodes if n.op == "placeholder")
    outputs = len(next(n for n in reversed(gm.graph.nodes) if n.op == "output").args[0])
    why = graphmemo.eligible_metadata()
    if why is None and fn.constants:
        why = "constants lifted out of the graph"
    if why is None and placeholders != inputs:
        why = f"{placeholders} ATen inputs for {inputs} Dynamo inputs"
    if why is not None:
        _log.debug("graph memo: not remembering %s: %s", fn.where, why)
        return
    graphmemo.remember(memo, fn.key, fn.signature[0], fn.signature[1], inputs, outputs)


def _from_memo(backend: _Backend, memo: str, gm: Optional[torch.fx.GraphModule], inputs: int,
               source: Optional[tuple]) -> Optional[Callable]:
    """The Dynamo graph's program from the graph memo's entry, fetched from
    the daemon and loaded, as the callable Dynamo expects; None (the full
    path then) when there is no entry or anything fails. ``gm`` is None
    when torch's precompile loads the graph without tracing it
    (:mod:`compiled.precompile`)."""
    from . import graphmemo, runtime
    from .client import verify_signature
    entry = graphmemo.lookup(memo)
    if entry is None or entry.get("inputs") != inputs:
        return None
    where, label = _names(source, gm, "inference")
    key = entry["key"]
    client = backend.client
    try:
        artifact = client.fetch(key, timeout=backend.options.timeout)
        if client._trust is not None:
            verify_signature(client._trust, key, artifact, entry.get("signature", ""),
                             entry.get("signature_key", ""))
        from torch.utils._python_dispatch import _disable_current_modes
        with _capture.paused_gc(), _disable_current_modes():
            program = runtime.load(artifact, boxed=True, native=backend.options.native,
                                   recycle_outputs=True)
    except Exception as e:  # the full path decides what to tell the user
        _log.debug("graph memo: entry %s for %s not used: %s: %s", memo[:16], where,
                   type(e).__name__, e)
        return None
    if len(program.artifact.program.outputs) != entry.get("outputs"):
        _log.debug("graph memo: entry %s for %s names a program with other outputs",
                   memo[:16], where)
        return None
    fn = _GraphFunction(backend, gm, "inference", where, label)
    fn.program, fn.fn, fn.key = program, program.fn, key
    backend.programs.append(program)
    _log.debug("compiled backend: %s -> program %s (graph memo)", where, key[:16])

    def run(*args):
        return fn.fn(list(args))
    run.graph = fn   # keeps the graph listed in loaded_graphs() while Dynamo holds run
    return run


def _attention_to_flash(gm: torch.fx.GraphModule) -> int:
    """Rewrites attention written out in an inference graph, softmax(q @
    k^T / c) @ v over 4-D [batch, heads, length, dim] tensors (what
    AOTAutograd records for it: expands and views around two bmm calls, a
    division by a number, _softmax over the last dim), into ATen's CPU flash
    attention with scale 1 / c, as Inductor's pattern matcher does. The
    written-out form materializes the [batch, heads, L, S] scores (24 MiB
    in bench/models.py's case), writes and reads them three times and
    holds them across the second product; the flash kernel works on blocks
    of them in cache (161 against 254 ms in eager, 2 threads). Its values
    are within a few roundings of eager's (it sums the softmax blockwise).
    Only inference graphs: a training forward would have to save the
    flash kernel's statistics for its backward. Returns the number of
    rewrites; never raises (a graph it does not recognize stays as it is)."""
    try:
        return _rewrite_attention(gm)
    except Exception as e:  # an optimization: the graph as recorded still runs
        _log.debug("attention rewrite skipped: %s", e)
        return 0


def _rewrite_attention(gm: torch.fx.GraphModule) -> int:
    aten = torch.ops.aten
    packet = getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None)
    flash = getattr(packet, "default", None)
    if flash is None:
        return 0

    def only(node, target):
        """node when it is a call of target with one user."""
        if isinstance(node, torch.fx.Node) and node.op == "call_function" and \
                node.target is target and len(node.users) == 1:
            return node
        return None

    def val(node):
        v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
        return v if isinstance(v, torch.Tensor) else None

    def batched(node):
        """The 4-D tensor t of view(expand(t, t.shape), [B*H, ., .])."""
        view = only(node, aten.view.default)
        expand = view and only(view.args[0], aten.expand.default)
        if not expand:
            return None
        t = expand.args[0]
        tv = val(t)
        if tv is None or tv.dim() != 4 or list(expand.args[1]) != list(tv.shape):
            return None
        return t

    pure = {aten.view.default, aten.expand.default, aten.bmm.default, aten._softmax.default,
            aten.div.Tensor, aten.transpose.int}
    count = 0
    for node in list(gm.graph.nodes):
        if node.graph is not gm.graph or node not in gm.graph.nodes:
            continue
        # view(bmm(view(expand(softmax)), view(expand(v))), [B, H, L, Ev])
        out_view = node if node.op == "call_function" and node.target is aten.view.default \
            else None
        bmm2 = out_view and only(out_view.args[0], aten.bmm.default)
        if not bmm2:
            continue
        sm = batched(bmm2.args[0])
        v = batched(bmm2.args[1])
        sm = sm and only(sm, aten._softmax.default)
        if not sm or v is None or sm.args[2] is not False:
            continue
        div = only(sm.args[0], aten.div.Tensor)
        if not div or not isinstance(div.args[1], (int, float)) or div.args[1] == 0:
            continue
        scores = only(div.args[0], aten.view.default)
        bmm1 = scores and only(scores.args[0], aten.bmm.default)
        if not bmm1:
            continue
        q = batched(bmm1.args[0])
        kt = batched(bmm1.args[1])
        kt = kt and only(kt, aten.transpose.int)
        if q is None or not kt:
            continue
        k = kt.args[0]
        qv, kv, vv, sv, ov = val(q), val(k), val(v), val(sm), val(out_view)
        if any(x is None for x in (qv, kv, vv, sv, ov)) or kv.dim() != 4:
            continue
        if sorted(d % 4 for d in kt.args[1:]) != [2, 3]:
            continue
        dim = sm.args[1] % 4
        if dim != 3 or qv.dtype not in (torch.float32, torch.float64) or \
                not (qv.dtype == kv.dtype == vv.dtype == ov.dtype):
            continue
        B, H, L, E = qv.shape
        if tuple(kv.shape[:2]) != (B, H) or kv.shape[3] != E or \
                tuple(vv.shape) != (B, H, kv.shape[2], E) or \
                tuple(ov.shape) != (B, H, L, vv.shape[3]):
            continue
        if any(isinstance(x, torch.SymInt) for x in (*qv.shape, *kv.shape, *vv.shape)):
            continue
        scale = 1.0 / float(div.args[1])
        fake = getattr(qv, "fake_mode", None)
        if fake is None:
            continue
        with fake:  # the metadata first: the graph changes only when it is known
            r = flash(qv, kv, vv, dropout_p=0.0, is_causal=False, scale=scale)
            c = aten.clone.default(r[0], memory_format=torch.contiguous_format)
        if ov.stride() not in (r[0].stride(), c.stride()):
            continue
        with gm.graph.inserting_before(out_view):
            call = gm.graph.call_function(flash, (q, k, v),
                                          {"dropout_p": 0.0, "is_causal": False,
                                           "scale": scale})
            first = gm.graph.call_function(operator.getitem, (call, 0))
            call.meta["val"] = r
            first.meta["val"] = r[0]
            if r[0].stride() != ov.stride():  # the flash output's layout is its own
                first = gm.graph.call_function(aten.clone.default, (first,),
                                               {"memory_format": torch.contiguous_format})
                first.meta["val"] = c
        out_view.replace_all_uses_with(first)
        # the written-out form, now unused (pure operators only: not
        # eliminate_dead_code, which would judge input mutations' copy_)
        work = [out_view]
        while work:
            n = work.pop()
            if isinstance(n, torch.fx.Node) and n.op == "call_function" and not n.users \
                    and n.target in pure:
                work.extend(a for a in n.args if isinstance(a, torch.fx.Node))
                gm.graph.erase_node(n)
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count


def _graph_label(gm: torch.fx.GraphModule) -> str:
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack")
        if stack:
            first = next(iter(stack.values()))
            cls = first[1] if isinstance(first, tuple) and len(first) > 1 else None
            if cls is not None:
                return getattr(cls, "__qualname__", str(cls))
    return f"a graph of {sum(1 for n in gm.graph.nodes if n.op == 'call_function')} operators"


def _dynamo_source(gm: torch.fx.GraphModule) -> Optional[tuple]:
    """(name, file, line) of the frame Dynamo turned into ``gm``, for the
    cache entry's label: the qualified name of its code ("Net" for
    ``Net.forward``: a module is named by its class; a graph break's
    continuation keeps Dynamo's "Net.torch_dynamo_resume_in_forward_at_12"),
    its file and first line. From Dynamo's tracing context (its first traced
    code object is the frame's own); else the outermost frame of the
    graph's stack traces; else None. Never raises."""
    from .labels import source_of_graph, source_of_code
    try:
        from torch._guards import TracingContext
        context = TracingContext.try_get()
        codes = getattr(context, "traced_code", None) if context is not None else None
        code = _compiled_code(codes) if codes else None
        found = source_of_code(code) if code is not None else source_of_graph(gm.graph)
    except Exception:  # private torch API: a label is worth no failure
        return None
    if found is None:
        return None
    name, file, line = found
    if name.endswith(".forward"):
        name = name[:-len(".forward")]
    return name, file, line


def _compiled_code(codes: list):
    """The code object that names the frame Dynamo compiled, from its traced
    code objects (first traced first): the first that is not Dynamo's own
    wrapper (torch.compile of an ``nn.Sequential`` traces Dynamo's
    ``wrap_inline`` first); when that is a special method of a class
    (``Sequential.__iter__``, called by the forward being traced), that
    class's ``forward`` when it was traced too."""
    dynamo_dir = os.path.dirname(torch._dynamo.__file__) + os.sep
    codes = [c for c in codes if not c.co_filename.startswith(dynamo_dir)]
    if not codes:
        return None
    first = getattr(codes[0], "co_qualname", codes[0].co_name)
    owner, _, method = first.rpartition(".")
    if owner and method.startswith("__") and method.endswith("__"):
        for c in codes:
            if getattr(c, "co_qualname", None) == owner + ".forward":
                return c
    return codes[0]


def _decompositions() -> Dict[Any, Callable]:
    """The decompositions AOTAutograd applies while tracing: none but those
    torch needs to trace at all. The daemon lowers the ATen operators
    themselves (batch norm, layer norm, softmax, convolutions...), which
    keeps graphs small and lets it call the same library kernels as eager
    where they are best."""
    return {}


# Operators torch 2 decomposes while AOTAutograd traces (Python kernels at
# their Autograd and CompositeImplicitAutograd keys, which the Python
# dispatcher AOTAutograd enables runs before any decomposition table is
# consulted) and that the daemon lowers itself, with ATen's exact indices
# and weights (compiler/lower/upsample.c, pool.c). Traced through those
# kernels, upsampling became index arithmetic, `_unsafe_index` gathers and
# lerps that the daemon lowers without knowing them for an upsampling: in
# lraspp_mobilenet_v3 a realized channels-last copy of the 8 x 21 x 224 x
# 224 result (32 MiB) before the output, where the operator writes the
# output directly (`compiled.compile`, whose capture sees the operator,
# ran that model in 178.7 ms against the backend's 291.0).
_LIBRARY_OPS = ("upsample_linear1d", "upsample_bilinear2d", "upsample_trilinear3d",
                "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d")
_LIBRARY_KEYS = (torch._C.DispatchKey.Autograd, torch._C.DispatchKey.CompositeImplicitAutograd)
_library_lock = threading.RLock()


@contextlib.contextmanager
def _library_operators():
    """While AOTAutograd traces: the operators of _LIBRARY_OPS dispatch to
    their C++ kernels (autograd formulas and composites: ``.vec`` computes
    its output size and calls the sized overload, the backward is the
    operator's own backward), as they do in eager, instead of torch's Python
    decompositions. Their Python kernels are put back afterwards; the lock
    keeps two traces of this process from interleaving the swap. Eager
    calls made meanwhile in other threads reach the same C++ kernels they
    reach without the Python dispatcher. A torch without these private
    attributes traces as before."""
    with _library_lock:
        saved = []
        try:
            for name in _LIBRARY_OPS:
                packet = getattr(torch.ops.aten, name, None)
                if packet is None:
                    continue
                for overload in packet.overloads():
                    op = getattr(packet, overload)
                    for key in _LIBRARY_KEYS:
                        if key in op.py_kernels:
                            saved.append((op, key, op.py_kernels.pop(key)))
                            op._dispatch_cache.clear()
        except AttributeError:  # private torch API: trace with the decompositions
            pass
        try:
            yield
        finally:
            for op, key, kernel in saved:
                op.py_kernels[key] = kernel
                op._dispatch_cache.clear()


def loaded_graphs() -> List[_GraphFunction]:
    """The graphs this process compiled through the backend and still holds,
    oldest first: ``.where`` names the graph, ``.program`` is its
    LoadedProgram (None while it runs as ATen calls; ``.program.summary``
    says what runs natively). For debugging and tests."""
    return sorted(_LOADED, key=lambda g: g.serial)


def is_aten_graph(gm: torch.fx.GraphModule) -> bool:
    """Whether every call in ``gm`` is an ATen operator overload (or a
    getitem): a graph from make_fx or AOTAutograd, not Dynamo's."""
    return all(n.op != "call_function" or n.target.__class__ is torch._ops.OpOverload
               or n.target is operator.getitem for n in gm.graph.nodes)


def compiled_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], *,
                     options: Optional[Dict[str, Any]] = None, **unused) -> Callable:
    """The ``torch.compile`` backend: ``torch.compile(model,
    backend="compiled")`` (the ``torch_dynamo_backends`` entry point) or
    ``backend=compiled.backend``. ``options`` are listed in the module
    docstring.

    Every graph goes through AOTAutograd (see the module docstring).
    """
    from . import graphmemo
    backend = _Backend(BackendOptions.parse(options))
    source = _dynamo_source(gm)  # now: AOTAutograd may compile the backward later
    memo = graphmemo.memo_key(gm, example_inputs, backend.memo_context())
    if memo is not None:
        fn = _from_memo(backend, memo, gm, len(example_inputs), source)
        if fn is not None:
            _precompile_record(gm, memo, len(example_inputs), source, options)
            return fn
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    with _library_operators():
        fn = aot_autograd(
            fw_compiler=functools.partial(_compile_graph, backend, source, "forward"),
            bw_compiler=functools.partial(_compile_graph, backend, source, "backward"),
            inference_compiler=functools.partial(
                _compile_graph, backend, source, "inference",
                memo=None if memo is None else (memo, len(example_inputs))),
            partition_fn=min_cut_rematerialization_partition,
            decompositions=_decompositions(),
            keep_inference_input_mutations=True,
        )(gm, example_inputs)
    if memo is not None:
        _precompile_record(gm, memo, len(example_inputs), source, options)
    return fn


def _precompile_record(gm, memo, inputs, source, options) -> None:
    """With torch's caching precompile on, records what re-creates this
    graph's callable in a new process without Dynamo's trace
    (:mod:`compiled.precompile`); never fails the compile."""
    if not getattr(torch._dynamo.config, "caching_precompile", False):
        return
    from . import precompile
    try:
        precompile.record(gm, memo, inputs, source, options)
    except Exception as e:
        _log.debug("compiled precompile: graph not recorded: %s: %s", type(e).__name__, e)
