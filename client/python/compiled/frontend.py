"""``compiled.compile()`` and ``compiled.backend()``: guarded compiled callables.

How a call runs
---------------
:class:`CompiledFunction` is what :func:`compile` returns. Each call:

1. reads the module's parameters and buffers (for an ``nn.Module``) through a
   small generated function that also checks the module tree has not
   changed (a submodule replaced or removed) and returns every submodule's
   ``training`` flag;
2. computes the **signature** of the call (:mod:`compiled.signature`):
   grad mode, inference mode, the training flags, the structure of the
   arguments and, per input, for a tensor its dtype, shape, strides,
   storage offset, device, requires_grad
   (for a user input requiring grad, also whether it is a leaf: parameters
   are leaves) and which earlier input it shares storage with, for anything
   else its type and value;
3. looks the signature up among the programs this callable has loaded; on a
   miss (the first call with new shapes, dtypes, strides, requires_grad,
   storage sharing, grad mode, a changed number...) it captures the function
   again with the call's own inputs (on copies; the RNG state is restored
   after the capture, so the call draws the same random numbers as an eager
   call would), compiles the graph through the daemon (or gets it from its
   cache), loads the artifact with :mod:`compiled.runtime`, and remembers it
   under the signature: a program never runs on inputs its signature does
   not describe. With dynamic shapes (``dynamic=True``, or by default
   once a dimension has been seen with two sizes; docs/dynamic-shapes.md)
   the program captured has size symbols, and a miss that differs from
   its signature only in sizes, strides and offsets is served by it when
   the trace's facts about the sizes hold (no capture, no compile); a call
   its guards refuse (``GuardFailure``) gets a static program of its own;
4. calls the program with (parameters, buffers, flattened user inputs); the
   program returns the outputs in the structure the function returns.

When the daemon fails for any reason that is not about the graph (it
cannot be reached, is stopping, stays busy, misses the deadline, cuts the
call, answers with an internal error or with an artifact whose digest does
not match), the call runs the original function eagerly and a
:class:`~compiled.DaemonUnavailableWarning` is issued once per callable; the
compile is retried on a later call with that signature after a back-off.
Only a graph the daemon refuses raises :class:`~compiled.CompileError`.

What the signature does not cover: the Python code of the function or of
``forward`` (and hooks registered after compiling), Python values reached
through closures or attributes other than parameters and buffers (tensors
reached that way are bound into the program by identity), and submodules
added after compiling. Recompile (call :func:`compile` again) after such
changes.
"""

from __future__ import annotations

import inspect
import itertools
import os
import logging
import sys
import threading
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import torch
import torch.utils._pytree as pytree

from . import CaptureError, UnsupportedCapture
from . import arena
from . import client as client_module
from . import runtime
from . import target as _target
from . import training as _training
from .errors import (ArtifactError, ArtifactWarning, CompileError, CompileFallbackWarning,
                     DaemonError,
                     DaemonUnavailableWarning, GuardFailure)
from .signature import (StateLayout, call_signature, flatten_args, global_state, sizeless,
                        what_changed)
from .v1 import compiled_pb2, graph_pb2

__all__ = ["BackendFunction", "CompiledFunction", "backend", "compile"]

_capture = sys.modules["compiled.capture"]
_log = logging.getLogger("compiled")

# Back-off before retrying a compile the daemon could not take: doubles from
# the first value up to the second, in seconds.
RETRY_FIRST = 10.0
RETRY_MAX = 300.0

_OPT_LEVELS = {
    None: compiled_pb2.OPT_LEVEL_DEFAULT,
    0: compiled_pb2.OPT_LEVEL_O0, 1: compiled_pb2.OPT_LEVEL_O1,
    2: compiled_pb2.OPT_LEVEL_O2, 3: compiled_pb2.OPT_LEVEL_O3,
    "O0": compiled_pb2.OPT_LEVEL_O0, "O1": compiled_pb2.OPT_LEVEL_O1,
    "O2": compiled_pb2.OPT_LEVEL_O2, "O3": compiled_pb2.OPT_LEVEL_O3,
    "default": compiled_pb2.OPT_LEVEL_DEFAULT,
}

_Tensor = torch.Tensor
_is_grad_enabled = torch.is_grad_enabled
_is_inference_mode_enabled = torch.is_inference_mode_enabled


def _eager_random(eager_random: Optional[bool]) -> bool:
    """The eager_random option: the argument, else $COMPILED_EAGER_RANDOM."""
    if eager_random is not None:
        return bool(eager_random)
    return os.environ.get("COMPILED_EAGER_RANDOM", "0").lower() in ("1", "true", "yes")


def _opt_level(opt_level) -> int:
    try:
        return _OPT_LEVELS[opt_level]
    except (KeyError, TypeError):
        raise ValueError(f"opt_level must be None, 0-3 or 'O0'-'O3', got {opt_level!r}") from None


# ---------------------------------------------------------------------------
# The compiled callable.
# ---------------------------------------------------------------------------

class _BadArtifact(Exception):
    """A training program's artifact could not be loaded (warned already)."""


class _Eager:
    """The entry of a signature whose compile could not reach the daemon."""
    __slots__ = ("retry_at", "delay")

    def __init__(self, delay: float):
        self.delay = delay
        self.retry_at = time.monotonic() + delay


class CompiledFunction:
    """The callable :func:`compile` returns; call it like the original.

    Attributes:
        programs: the LoadedPrograms loaded so far, oldest first (debugging:
            ``program.source`` is the generated Python; see :meth:`sources`).
        compiles: how many programs were compiled or fetched from the daemon.
    """

    def __init__(self, fn_or_module: Union[Callable, torch.nn.Module], example_inputs, *,
                 server: Optional[str] = None, opt_level=None, keep_input_mutations: bool = True,
                 eager_random: Optional[bool] = None, dynamic: Optional[bool] = None):
        if not callable(fn_or_module):
            raise TypeError(f"compile expects a callable or an nn.Module, got "
                            f"{type(fn_or_module).__name__}")
        self._fn = fn_or_module
        self._module = fn_or_module if isinstance(fn_or_module, torch.nn.Module) else None
        self._client = client_module.get_client(server)
        self._opt_level = _opt_level(opt_level)
        self._keep_input_mutations = bool(keep_input_mutations)
        self._eager_random = _eager_random(eager_random)
        self._entries: Dict[tuple, Any] = {}   # signature -> program fn or _Eager
        self.programs: List[runtime.LoadedProgram] = []
        self.compiles = 0
        if dynamic not in (None, True, False):
            raise TypeError(f"compile: dynamic must be None, True or False, got {dynamic!r}")
        self._dynamic = dynamic
        # dynamic shapes (docs/dynamic-shapes.md): the first shape of each
        # user tensor (by flat index), the dims that have changed since
        # (dynamic=None) and the symbolic programs, newest first, as
        # (program fn, ShapeGuards, dims)
        self._first_shapes: Dict[int, tuple] = {}
        self._changed_dims: Dict[int, set] = {}
        self._symbolic: List[tuple] = []
        # why a symbolic program cannot be had (the trace or the daemon
        # refused one): not tried again, every signature is static
        self._symbolic_broken: Optional[str] = None
        # How the last capture traced: "meta" (shape-only) or "real".
        self.capture_method: Optional[str] = None
        self._last_fn = None
        self._last_training: Optional[_training.TrainingStep] = None
        self._warned = False
        self._fallback_warned = False
        self._artifact_warned = False

        self._lock = threading.RLock()
        self._layout = StateLayout(self._module) if self._module is not None else None
        self._layout_fresh = True  # built just now: the first lookup need not rebuild it
        self._bind_signature = None
        self._source = None  # (name, file, line) for the cache's labels, found once
        try:
            self.__wrapped__ = fn_or_module
            self.__doc__ = getattr(fn_or_module, "__doc__", None)
        except AttributeError:
            pass
        self._prepare(_capture._as_input_tuple(example_inputs))

    def __repr__(self) -> str:
        return f"<compiled {_capture._describe(self._fn)}: {len(self.programs)} programs>"

    def _entry_label(self, role: Optional[str] = None):
        """The label of the cache entries this function's compiles make:
        the module's class or the function's qualified name (with the role
        of a training graph: "Net (backward)"), where its forward or def
        starts, this host (compiled.labels)."""
        from .labels import make_label, source_of
        if self._source is None:
            try:
                self._source = source_of(self._fn)
            except Exception:  # a label is worth no failure
                self._source = (_capture._describe(self._fn), "", 0)
        name, file, line = self._source
        return make_label(f"{name} ({role})" if role else name, file, line)

    def sources(self) -> str:
        """The code of every program loaded so far: the generated C of its
        native program (when it has one) and the Python that runs it."""
        parts = []
        for p in self.programs:
            if p.c_source:
                parts.append(p.c_source)
            parts.append(p.source)
        return "\n".join(parts)

    def summary(self) -> Dict[str, Any]:
        """For the program last run (else the last compiled): graph ``nodes``,
        ``native`` (lowered into generated kernels), ``extern`` (BLAS and
        convolution calls through ATen), ``fallback`` (other ATen calls),
        ``kernels`` (generated kernels), ``fallback_ops``, ``arena_bytes``,
        ``target`` (the -march level of its native code, "" for an ATen
        program) and ``runs``: "native" when generated kernels run (with
        ATen calls for library operators and fallbacks), "aten" when only
        ATen operators do (nothing was lowered into a kernel, native code
        cannot run here, or the ATen program measured faster: ``reason``
        says which), "measuring" while :mod:`compiled.choice` decides. For
        a training signature (a compiled forward and backward), the
        forward's, with the backward's under ``"backward"``. Empty before
        any program."""
        last = self._last_fn
        if last is None and self._last_training is not None and \
                self.programs and self.programs[-1] is self._last_training.bw_program:
            last = self._last_training  # compiled last, not run yet
        if isinstance(last, _training.TrainingStep):
            return last.summary()
        for p in reversed(self.programs):
            if last is None or p.fn is last:
                return dict(p.summary)
        return dict(self.programs[-1].summary) if self.programs else {}

    def release_memory(self) -> int:
        """Drops the memory kept between calls for reuse: the arenas of this
        function's native programs and the process's free recycled output
        blocks (see compiled.arena). The next call allocates afresh, paying
        the page faults of new memory once. Returns the bytes released."""
        released = 0
        for p in self.programs:
            pool = getattr(p.native_fn, "__globals__", {}).get("_pool")
            if isinstance(pool, list):  # arenas; their small pointer tables stay
                released += sum(a.release() for a in pool)
        return released + arena.release_output_pool()

    # -- the hot path --------------------------------------------------------

    def __call__(self, *args, **kwargs):
        if kwargs:
            args = self._bind(args, kwargs)
        layout = self._layout
        try:
            if layout is not None:
                # None (a submodule moved) or KeyError (state deleted) or a
                # None tensor: all end in the slow path, which re-reads.
                state, flags = layout.read()
            else:
                state = flags = ()
            flat, structure = flatten_args(args)
            entry = self._entries.get((_is_grad_enabled(), _is_inference_mode_enabled(),
                                       global_state(), flags, structure,
                                       call_signature(state, flat)))
        except Exception:
            return self._call_slow(args)
        if entry is None:
            return self._call_slow(args)
        if entry.__class__ is _Eager:
            if time.monotonic() < entry.retry_at:
                return self._fn(*args)
            return self._call_slow(args)
        self._last_fn = entry
        # Only the program's arguments stay referenced through the call: the
        # state tuple and the flags (a ResNet's are over 512 bytes each, so
        # malloc'd) would add to the call's peak memory, which is eager's.
        call_args = (*state, *flat)
        state = flags = None
        try:
            return entry(*call_args)
        except GuardFailure as e:  # raised before anything ran
            return self._guard_failed(args, e)

    def _guard_failed(self, args, failure: GuardFailure):
        """A symbolic program refused the call (one of its guards is false
        at these sizes): compile a static program for this signature (one
        new compile, not an error) and run it."""
        _log.debug("compiled %s: %s; compiling a static program for these inputs",
                   _capture._describe(self._fn), failure)
        with self._lock:
            if self._layout is not None:
                state, flags = self._layout.read()
            else:
                state = flags = ()
            flat, structure = flatten_args(args)
            key = (_is_grad_enabled(), _is_inference_mode_enabled(), global_state(),
                   flags, structure, call_signature(state, flat))
            entry = self._compile_for(args, state, flat, None, dynamic=False)
            self._entries[key] = entry
        if entry.__class__ is _Eager:
            return self._fn(*args)
        return entry(*state, *flat)

    # -- misses --------------------------------------------------------------

    def _call_slow(self, args):
        """A call the hot path could not serve: find or compile its program."""
        entry, state, flat = self._lookup_or_compile(args)
        if entry.__class__ is _Eager:
            return self._fn(*args)
        self._last_fn = entry
        try:
            return entry(*state, *flat)
        except GuardFailure as e:
            return self._guard_failed(args, e)

    def _lookup_or_compile(self, args: tuple):
        """Returns (entry, state, flat) for a call with ``args``: the cached
        entry of its signature, or a new one (compiled now, or an eager
        fallback). Re-reads the module's layout first: a changed module tree
        forgets every program."""
        with self._lock:
            if self._module is not None and not self._layout_fresh:
                layout = StateLayout(self._module)
                if layout.identity != self._layout.identity:
                    self._layout = layout
                    self._entries.clear()
            self._layout_fresh = False
            if self._module is not None:
                state, flags = self._layout.read()
            else:
                state = flags = ()
            flat, structure = flatten_args(args)
            try:
                key = (_is_grad_enabled(), _is_inference_mode_enabled(), global_state(),
                       flags, structure, call_signature(state, flat))
                entry = self._entries.get(key)
            except Exception:  # unusual inputs: capture will explain
                key = entry = None
            if entry is None and key is not None and self._symbolic:
                entry = self._symbolic_hit(state, flat, key)
                if entry is not None:  # a program with size symbols serves it
                    self._entries[key] = entry
                    return entry, state, flat
            if entry is None and key is not None and self._entries:
                _log.info("compiled %s: compiling again: %s", _capture._describe(self._fn),
                          what_changed(next(reversed(self._entries)), key,
                                       self._layout.paths if self._layout else ()))
            if entry is None or (entry.__class__ is _Eager
                                 and time.monotonic() >= entry.retry_at):
                entry = self._compile_for(args, state, flat, entry, key=key)
                if key is not None:
                    self._entries[key] = entry
            return entry, state, flat

    def _dynamic_dims(self, flat) -> Dict[int, List[int]]:
        """The dims of the user's tensors (by index in ``state + flat``,
        offset by the state added by the caller) to make symbols:
        dynamic=True every dim but those of size 0 or 1 (as Dynamo does:
        such a size changes what broadcasts); None the dims seen with
        two sizes so far; False none."""
        if self._dynamic is False:
            return {}
        dims: Dict[int, List[int]] = {}
        for i, t in enumerate(flat):
            if not isinstance(t, _Tensor):
                continue
            shape = tuple(t.shape)
            if self._dynamic:
                chosen = [d for d, n in enumerate(shape) if n > 1]
            else:
                first = self._first_shapes.setdefault(i, shape)
                changed = self._changed_dims.setdefault(i, set())
                if len(first) == len(shape):
                    changed.update(d for d, (a, b) in enumerate(zip(first, shape)) if a != b)
                chosen = sorted(d for d in changed if shape[d] > 1)
            if chosen:
                dims[i] = chosen
        return dims

    def _symbolic_eligible(self, state, flat) -> bool:
        return self._dynamic is not False and self._symbolic_broken is None and \
            all(isinstance(t, _Tensor) for t in flat) and \
            not (_is_grad_enabled() and any(t.requires_grad
                                            for t in itertools.chain(state, flat)))

    def _symbolic_hit(self, state, flat, key):
        """The newest program with size symbols compiled for calls like this
        one but for sizes (the same signature without the user tensors'
        sizes, strides and offsets: dtypes, devices, ranks, storage
        sharing, module state, grad mode...) whose trace's facts about the
        sizes (compiled.symbolic.ShapeGuards) hold for these inputs, or
        None."""
        if key is None or not self._symbolic_eligible(state, flat):
            return None
        kind = sizeless(key)
        inputs = (*state, *flat)
        for fn, guards, k in self._symbolic:
            if k != kind:
                continue
            try:
                if guards.check(inputs):
                    return fn
            except Exception:  # a shape the guards cannot read: not this one
                continue
        return None

    def _try_symbolic(self, args, state, flat, key):
        """A symbolic program for this call: one already compiled whose
        trace's facts hold for these inputs, or a new one when dims are to
        be dynamic (docs/dynamic-shapes.md). None: compile statically (no
        dim is dynamic, the program trains, an input is not a tensor, or
        the symbolic trace failed, logged at DEBUG)."""
        if key is None or not self._symbolic_eligible(state, flat):
            return None
        fn = self._symbolic_hit(state, flat, key)
        if fn is not None:
            return fn
        dims = self._dynamic_dims(flat)
        if not dims:
            return None
        n = len(state)
        _log.info("compiled %s: compiling one program for every size of %s",
                  _capture._describe(self._fn),
                  ", ".join(f"argument {i} dimension{'s' if len(d) > 1 else ''} "
                            f"{', '.join(map(str, d))}" for i, d in dims.items()))
        try:
            fn, guards = self._compile_symbolic(args, state, flat,
                                                {n + i: d for i, d in dims.items()})
        except DaemonError as e:
            if not isinstance(e, CompileError):
                raise  # not the graph's fault: eager for now (_compile_for)
            # the daemon refused the symbolic graph: the static one may do
            _log.debug("compiled %s: no symbolic program (%s); compiling for these sizes",
                       _capture._describe(self._fn), e)
            self._symbolic_broken = str(e)
            return None
        except Exception as e:
            _log.debug("compiled %s: no symbolic program (%s: %s); compiling for these sizes",
                       _capture._describe(self._fn), type(e).__name__, e)
            self._symbolic_broken = f"{type(e).__name__}: {e}"
            return None
        self._symbolic.insert(0, (fn, guards, sizeless(key)))
        return fn

    def _compile_symbolic(self, args, state, flat, dims):
        from . import dynamo as _dynamo, symbolic
        module = self._module
        if module is not None:
            params, buffers, state_paths = _capture._module_state(module)
        else:
            params, buffers, state_paths = [], [], {}
        _, user_spec = pytree.tree_flatten(_capture._as_input_tuple(args))
        with torch.no_grad(), _fork_rng():
            gm, guards = symbolic.trace_symbolic(self._fn, module, state_paths, len(state),
                                                 user_spec, list(state) + list(flat), dims)
        kinds = ([graph_pb2.INPUT_KIND_PARAMETER] * len(params)
                 + [graph_pb2.INPUT_KIND_BUFFER] * len(buffers)
                 + [graph_pb2.INPUT_KIND_USER_INPUT] * len(flat))
        data, constants = _dynamo.encode_graph(gm, _capture._describe(self._fn), kinds)
        if any(isinstance(c, torch._subclasses.FakeTensor) for c in constants):
            raise symbolic.Unencodable("the program makes tensor constants")
        output = next(n for n in gm.graph.nodes if n.op == "output")
        out_spec = pytree.tree_flatten(output.args[0])[1]
        options = compiled_pb2.CompileOptions(
            opt_level=self._opt_level, return_input_mutations=not self._keep_input_mutations,
            mode=compiled_pb2.MODE_INFERENCE, eager_random=self._eager_random)
        key, artifact = self._client.compile(data, options, target=_target.target_message(),
                                             label=_capture._describe(self._fn),
                                             entry_label=self._entry_label())
        self.compiles += 1
        with _capture.paused_gc():
            program = runtime.load(artifact, constants=constants, out_spec=out_spec)
        self._check_inputs(program, len(state), len(flat))
        self.programs.append(program)
        _log.debug("compiled %s: program %d with size symbols (key %s, dims %s)",
                   _capture._describe(self._fn), len(self.programs), key[:16], dims)
        return program.fn, guards

    def _compile_for(self, args, state, flat, previous: Optional[_Eager], dynamic=True,
                     key=None):
        """Capture, compile and load a program for these inputs. Returns the
        program function, or an :class:`_Eager` entry when the daemon could
        not be reached. ``dynamic``: a symbolic program may serve them
        (``key``: their signature)."""
        if dynamic:
            try:
                fn = self._try_symbolic(args, state, flat, key)
            except DaemonError as e:  # not the graph's fault: run eagerly for now
                self._warn_eager(e)
                delay = RETRY_FIRST if previous is None else min(previous.delay * 2, RETRY_MAX)
                return _Eager(delay)
            if fn is not None:
                return fn
        grad = _is_grad_enabled()
        training = grad and any(isinstance(t, _Tensor) and t.requires_grad
                                for t in itertools.chain(state, flat))
        if training and not _is_inference_mode_enabled():
            try:
                return self._compile_training(args, state, flat)
            except _training.NothingToDifferentiate as e:
                # e.g. a mask or an argmax: what eager returns does not
                # require grad, so an inference program computes it
                _log.debug("compiled %s: an inference program under grad mode: %s",
                           _capture._describe(self._fn), e)
                training = False
            except _BadArtifact:
                return _Eager(float("inf"))  # warned already
            except _training.NotSplittable as e:
                _log.info("compiled %s: training through one ATen program, not a compiled "
                          "forward and backward: %s", _capture._describe(self._fn), e)
            except DaemonError as e:
                if isinstance(e, CompileError):
                    raise
                self._warn_eager(e)
                delay = RETRY_FIRST if previous is None else min(previous.delay * 2, RETRY_MAX)
                return _Eager(delay)
        try:
            with _fork_rng():
                captured = _capture.trace(self._fn, args)
            self.capture_method = captured.method
        except UnsupportedCapture as e:
            # Running it eagerly is exact; compiling it could be wrong.
            if not self._fallback_warned:
                self._fallback_warned = True
                warnings.warn(f"compiled: {e} Running it eagerly.",
                              CompileFallbackWarning, stacklevel=_user_stacklevel())
            return _Eager(float("inf"))
        options = compiled_pb2.CompileOptions(
            opt_level=self._opt_level,
            return_input_mutations=not self._keep_input_mutations,
            mode=compiled_pb2.MODE_TRAINING if training else compiled_pb2.MODE_INFERENCE,
            eager_random=self._eager_random)
        try:
            key, data = self._client.compile(captured.graph_bytes, options,
                                             target=_target.target_message(),
                                             label=_capture._describe(self._fn),
                                             entry_label=self._entry_label())
        except CompileError:
            raise
        except DaemonError as e:
            # Not the graph's fault: run eagerly now, compile again later.
            self._warn_eager(e)
            delay = RETRY_FIRST if previous is None else min(previous.delay * 2, RETRY_MAX)
            return _Eager(delay)
        self.compiles += 1
        try:
            with _capture.paused_gc():  # as for the capture; not while waiting for the daemon
                program = runtime.load(data, constants=list(captured.constants.values()),
                                       out_spec=captured.out_spec)
            self._check_inputs(program, len(state), len(flat))
        except Exception as e:  # whatever the artifact holds, user code never sees it
            self._warn_artifact(key, e)
            return _Eager(float("inf"))
        self.programs.append(program)
        _log.debug("compiled %s: program %d for a new signature (key %s, %s, grad=%s)",
                   _capture._describe(self._fn), len(self.programs), key[:16],
                   "training" if training else "inference", grad)
        return program.fn

    def _compile_graph(self, gm: torch.fx.GraphModule, examples: list,
                       boxed: bool = False, role: str = "forward") -> runtime.LoadedProgram:
        """Capture a forward or backward graph of a training signature on
        ``examples`` (no input requires grad) and compile it as an inference
        program; the program returns a tuple (boxed: see runtime.load)."""
        # Traced as a function, not as a module: the tensors the graph holds
        # as attributes (a closure's tensor, a torch.tensor([...]) the
        # program made) are its constants, bound when the program loads,
        # not module state a caller would have to pass.
        def graph(*xs):
            return gm(*xs)
        graph.__qualname__ = graph.__name__ = type(gm).__name__

        with torch.no_grad(), _fork_rng():
            captured = _capture.trace(graph, examples)
        options = compiled_pb2.CompileOptions(
            opt_level=self._opt_level,
            return_input_mutations=not self._keep_input_mutations,
            mode=compiled_pb2.MODE_INFERENCE, separate_temporaries=True,
            eager_random=self._eager_random)
        key, data = self._client.compile(captured.graph_bytes, options,
                                         target=_target.target_message(),
                                         label=f"{_capture._describe(self._fn)} ({role})",
                                         entry_label=self._entry_label(role))
        self.compiles += 1
        try:
            with _capture.paused_gc():
                program = runtime.load(data, constants=list(captured.constants.values()),
                                       boxed=boxed, recycle_outputs=False)
            kinds = [program.input_kinds[i] for i in program.arg_inputs]
            if kinds != [graph_pb2.INPUT_KIND_USER_INPUT] * len(examples):
                raise ArtifactError(f"program {program.key[:12]}: its inputs are "
                                    f"{_kind_names(kinds)}, expected {len(examples)} user "
                                    "inputs")
        except Exception as e:
            self._warn_artifact(key, e)
            raise _BadArtifact(str(e)) from e
        return program

    def _compile_training(self, args, state, flat) -> "_training.TrainingStep":
        """A compiled forward and backward for a call whose outputs require
        grad (compiled.training). Raises NotSplittable when the program
        cannot be run that way."""
        module = self._module
        state_paths = self._layout.state_paths if module is not None else {}
        flat_real = list(state) + list(flat)
        _, user_spec = pytree.tree_flatten(args)
        try:
            with _capture.paused_gc(), _fork_rng():
                split = _training.split(self._fn, module, state_paths, len(state), user_spec,
                                        flat_real)
        except _training.NotSplittable:
            raise
        except Exception as e:
            # The one-program path traces again and reports the program's
            # own error, if it has one, as an eager call would.
            raise _training.NotSplittable(f"the joint trace failed: {type(e).__name__}: "
                                          f"{e}") from e
        examples = [t.detach() if isinstance(t, _Tensor) else t for t in flat_real]
        try:
            fw = self._compile_graph(split.fw, examples)
            # The backward's example inputs: what the forward saves, computed
            # by the forward program on copies.
            with torch.no_grad(), _fork_rng():
                outs = fw.fn(*_capture._copy_tensors(examples))
            tangents = [torch.zeros(o.shape, dtype=o.dtype, device=o.device)
                        for o, need in zip(outs[:split.num_outs], split.needs_grad) if need]
            bw_examples = (list(outs[split.num_outs:])
                           + [examples[i] for i in split.saved_primals] + tangents)
            del outs
            bw = self._compile_graph(split.bw, bw_examples, boxed=True, role="backward")
        except (CompileError, CaptureError) as e:
            raise _training.NotSplittable(f"the forward or backward graph failed: {e}") from e
        self.programs += [fw, bw]
        _log.debug("compiled %s: training programs %s (forward) and %s (backward), %d saved "
                   "values", _capture._describe(self._fn), fw.key[:16], bw.key[:16],
                   split.num_saved + len(split.saved_primals))
        self._last_training = _training.TrainingStep(split, fw, bw, len(flat_real))
        return self._last_training

    def _check_inputs(self, program: runtime.LoadedProgram, n_state: int, n_flat: int) -> None:
        """The program must take (parameters, buffers, user inputs)."""
        kinds = [program.input_kinds[i] for i in program.arg_inputs]
        n_params = self._layout.num_params if self._layout is not None else 0
        expected = ([graph_pb2.INPUT_KIND_PARAMETER] * n_params
                    + [graph_pb2.INPUT_KIND_BUFFER] * (n_state - n_params)
                    + [graph_pb2.INPUT_KIND_USER_INPUT] * n_flat)
        if kinds != expected:
            raise ArtifactError(f"program {program.key[:12]}: its inputs are "
                                f"{_kind_names(kinds)}, expected {_kind_names(expected)}")

    def _warn_artifact(self, key: str, error: Exception) -> None:
        _log.warning("compiled %s: the artifact %s could not be loaded: %s: %s",
                     _capture._describe(self._fn), key, type(error).__name__, error)
        if not self._artifact_warned:
            self._artifact_warned = True
            warnings.warn(f"compiled: the daemon's artifact {key[:16]} for "
                          f"{_capture._describe(self._fn)} could not be loaded "
                          f"({type(error).__name__}: {error}); running it eagerly. "
                          f"`compilectl evict {key[:16]}` removes it from the cache.",
                          ArtifactWarning, stacklevel=_user_stacklevel())

    def _warn_eager(self, error: Exception) -> None:
        if not self._warned:
            self._warned = True
            warnings.warn(f"compiled: {error}; running {_capture._describe(self._fn)} eagerly "
                          f"(daemon {self._client.address}). Compiling will be retried later.",
                          DaemonUnavailableWarning, stacklevel=_user_stacklevel())

    # -- setup ---------------------------------------------------------------

    def _prepare(self, example_inputs: tuple) -> None:
        """Compile for the example inputs (without running anything)."""
        self._lookup_or_compile(example_inputs)

    def _bind(self, args: tuple, kwargs: dict) -> tuple:
        """Keyword arguments -> positional ones, by the function's signature
        (defaults filled in for skipped parameters)."""
        if self._bind_signature is None:
            target = self._module.forward if self._module is not None else self._fn
            self._bind_signature = inspect.signature(target)
        bound = self._bind_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        if bound.kwargs:
            raise TypeError(f"compiled: keyword-only arguments ({', '.join(bound.kwargs)}) "
                            "are not supported; pass them positionally")
        return bound.args


_PACKAGE_DIR = __file__.rpartition("/")[0] if "/" in __file__ else ""


def _user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning point at the first frame
    outside this package (the user's call of compile() or of the callable)."""
    frame = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR + "/"):
        frame = frame.f_back
        level += 1
    return level


def _kind_names(kinds: List[int]) -> str:
    return "[" + ", ".join(graph_pb2.InputKind.Name(k).replace("INPUT_KIND_", "").lower()
                           for k in kinds) + "]"


class _fork_rng:
    """Restores the CPU (and initialized CUDA) RNG state on exit, so that a
    capture, which runs the program twice, draws no random numbers."""

    def __enter__(self):
        self.cpu = torch.get_rng_state()
        self.cuda = None
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            self.cuda = torch.cuda.get_rng_state_all()
        return self

    def __exit__(self, *exc):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


# ---------------------------------------------------------------------------
# Public entry points.
# ---------------------------------------------------------------------------

def compile(fn_or_module: Union[Callable, torch.nn.Module], example_inputs, *,
            server: Optional[str] = None, opt_level=None,
            keep_input_mutations: bool = True,
            eager_random: Optional[bool] = None,
            dynamic: Optional[bool] = None) -> CompiledFunction:
    """Compile ``fn_or_module`` through the daemon; return a callable with
    the same calling convention.

    Args:
        fn_or_module: a function of tensors (and Python numbers, strings,
            None, nested in tuples, lists and dicts), or an ``nn.Module``
            whose parameters and buffers are read at every call (so
            ``load_state_dict`` and ``.to()`` after compiling are honoured).
        example_inputs: the positional arguments to capture with (a tuple or
            list; a lone tensor is accepted). They are never modified.
        server: the daemon's address (default: ``$COMPILED_SERVER``, else
            ``127.0.0.1:7421``).
        opt_level: None (the daemon's default), 0-3 or "O0"-"O3".
        keep_input_mutations: let the program write mutated inputs itself
            when it may (else the runtime applies the new values).
        eager_random: draw random numbers (dropout's masks) with the same
            ATen calls as eager, so that under the same seed they are
            eager's, bit for bit. By default (False, or
            ``$COMPILED_EAGER_RANDOM=1`` for True) generated code draws
            them from a seed it takes from torch's generator at each call:
            the same distribution, reproducible under ``torch.manual_seed``,
            other numbers than eager's, and much faster (docs/training.md).
        dynamic: dynamic shapes (docs/dynamic-shapes.md), for inference
            calls whose inputs are tensors. True: one program with size
            symbols for every dimension of the user's tensors but those of
            size 0 or 1 (module state keeps its sizes). None (the default):
            static programs until a dimension is seen with a second size,
            then one program where it is a symbol. False: a program per
            set of sizes. A call a symbolic program's guards refuse gets a
            static program of its own (one more compile).

    Raises:
        CaptureError: the function cannot be captured.
        CompileError: the daemon refused the graph.

    If the daemon cannot be reached or fails for a reason other than the
    graph (stopping, busy, deadline, cancelled, internal error), the callable
    runs ``fn_or_module`` eagerly, warns once
    (:class:`DaemonUnavailableWarning`) and retries later. Calls whose inputs differ from every compiled signature (shape,
    dtype, strides, requires_grad, storage sharing, grad mode, a Python
    number...) are captured and compiled again for those inputs.
    """
    return CompiledFunction(fn_or_module, example_inputs, server=server, opt_level=opt_level,
                            keep_input_mutations=keep_input_mutations,
                            eager_random=eager_random, dynamic=dynamic)


class BackendFunction(CompiledFunction):
    """What :func:`backend` returns: a :class:`CompiledFunction` that also
    speaks AOTAutograd's *boxed* calling convention.

    functorch's AOTAutograd calls a compiler's result with one list holding
    every input (``f([x, w])``) when the result has ``_boxed_call``, so it can
    free inputs early; TorchDynamo and plain callers use ``f(x, w)``. The
    inputs of an FX graph are tensors and numbers, never lists, so a call
    with a single list argument is unambiguous: it is unboxed here.
    """
    _boxed_call = True

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and args[0].__class__ is list:
            args = tuple(args[0])
        return CompiledFunction.__call__(self, *args, **kwargs)


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[torch.Tensor], **kwargs):
    """A backend for ``torch.compile`` and a compiler for ATen-level FX graphs.

    - Given Dynamo's torch-level graph (``torch.compile(model,
      backend=compiled.backend)``), it is the ``torch.compile`` backend,
      :func:`compiled.dynamo.compiled_backend` (keyword ``options`` as
      there).
    - Given an ATen-level GraphModule (e.g. from ``make_fx``, or
      AOTAutograd's forward or backward graph), it compiles that graph:
      it returns a callable taking the same positional inputs, or one
      list of them (AOTAutograd's boxed convention: ``aot_function(f,
      fw_compiler=compiled.backend, bw_compiler=compiled.backend)`` works
      without ``make_boxed_compiler`` and without a warning), and
      returning what ``gm`` returns. Tensor constants the graph reads with
      ``get_attr`` are bound into the program; registered parameters and
      buffers of ``gm`` are read at call time.
    """
    from . import dynamo
    if kwargs or not dynamo.is_aten_graph(gm):
        return dynamo.compiled_backend(gm, example_inputs, **kwargs)
    return BackendFunction(gm, tuple(example_inputs))
