"""Run native programs: generated kernels in a shared object, ATen calls for
library operators and fallbacks, one arena per call (docs/artifact.md,
"Native programs").

A native program computes the same function as the artifact's ATen
program: same inputs, same outputs in the same layout. So the mutation and
aliasing epilogue of :mod:`compiled.runtime` applies to it unchanged, and
:func:`build` reuses the runtime's code generator for the input checks and
the epilogue, generating only the body differently:

- the shared object is written to a private file (mode 0600, in a private
  directory), loaded with ``ctypes`` once per artifact key and process, and
  the file is removed at once; its runtime libraries (OpenMP, SLEEF) and the
  CPU features it was built for are checked first;
- each call takes an *arena* from the program's pool (or makes one): a
  uint8 tensor of ``memory_plan.arena_bytes`` with the views the ATen calls
  need precomputed, and its own pointer table (so concurrent calls from
  several threads never share one). The arena tensor is made just before
  the first instruction that needs it. An arena of 32 MiB or more stays
  allocated between calls (glibc would map it afresh every time, and its
  page faults cost about 2 ms per MiB on the machines this was measured
  on); a smaller one is freed at the end of the call, where malloc
  recycles it as it does eager's temporaries, so it adds nothing to the
  process's memory between calls. A program with no segment and no arena
  view (ATen calls only) takes no arena at all. The first arena of a
  program (1-64 MiB) is allocated when it loads, and a thread touches
  its pages while the loader goes on, so the first call finds them mapped;
- program outputs are allocated per call with ``torch.empty_strided``
  (with eager's strides), extern calls write into their planned buffers
  through ``.out`` overloads, fallback results are dropped after their last
  use;
- a segment call passes the pointer table to ``gc_seg<N>``; a non-zero
  return (an index out of range) raises ``NativeIndexError``, both an
  ``IndexError`` and a ``RuntimeError`` (eager raises one or the other).

Environment: ``COMPILED_NATIVE=0`` runs ATen programs only;
``COMPILED_TARGET=x86-64-v3`` (or another -march level) caps the ISA
features reported as the compile target (:mod:`compiled.target`);
``COMPILED_ARENA_REUSE=0`` frees every arena at the end of its call
(arenas, the output pool and donations: :mod:`compiled.arena`),
``=all`` keeps every arena between calls. ``COMPILED_PROFILE=1`` (read
when a program is loaded) wraps each segment call in a
``torch.profiler.record_function`` range named after the segment and its
kernels, so ``torch.profiler`` shows the time of the generated code beside
the ATen calls.
"""

from __future__ import annotations

import ast
import ctypes
import logging
import os
import re
import tempfile
import threading
import zlib
from typing import Any, Dict, List, Optional

import torch

from . import arena, formats
from .target import MARCH_FEATURES, cpu_flags
from .errors import ArtifactError, GuardFailure
from .v1 import artifact_pb2

__all__ = ["NativeUnavailable", "available", "build", "source_of"]

_log = logging.getLogger("compiled")


class _Placement:
    """The placement kinds as plain ints (an enum wrapper's attribute
    lookup costs a microsecond, thousands of times per load)."""
    PLACEMENT_INPUT = artifact_pb2.PlacementKind.PLACEMENT_INPUT
    PLACEMENT_ARENA = artifact_pb2.PlacementKind.PLACEMENT_ARENA
    PLACEMENT_VIEW = artifact_pb2.PlacementKind.PLACEMENT_VIEW
    PLACEMENT_OUTPUT = artifact_pb2.PlacementKind.PLACEMENT_OUTPUT
    PLACEMENT_RESULT = artifact_pb2.PlacementKind.PLACEMENT_RESULT
    PLACEMENT_TEMP = artifact_pb2.PlacementKind.PLACEMENT_TEMP


# The ABI the generated code speaks (compiler/codegen/cgen.h): 1, or 2 for
# a program with size symbols (segments take the symbols' values too).
ABI_VERSION = 1
ABI_SYMBOLIC = 2

class NativeUnavailable(Exception):
    """This process cannot run an artifact's native code (missing runtime
    library, CPU without the features it was built for, disabled); the
    caller runs the ATen program instead."""


def available() -> bool:
    """False when COMPILED_NATIVE=0."""
    return os.environ.get("COMPILED_NATIVE", "1") not in ("0", "false", "no")


_lib_checked: Dict[str, Optional[str]] = {}
_libs_lock = threading.Lock()
_loaded: Dict[str, ctypes.CDLL] = {}
_private_dir: Optional[str] = None


def _check_runtime(code) -> None:
    for lib in code.runtime_libraries:
        with _libs_lock:
            if lib not in _lib_checked:
                try:
                    ctypes.CDLL(lib)
                    _lib_checked[lib] = None
                except OSError as e:
                    _lib_checked[lib] = str(e)
        if _lib_checked[lib] is not None:
            raise NativeUnavailable(f"the native code needs {lib}, which cannot be "
                                    f"loaded here ({_lib_checked[lib]}); on Debian, "
                                    "install libsleef3, libgomp1, libblas3 and libdnnl2")
    want = MARCH_FEATURES.get(code.target)
    if code.target and want is None:
        raise NativeUnavailable(f"the native code was built for an unknown target "
                                f"{code.target!r}")
    missing = (want or set()) - set(cpu_flags())
    if missing:
        raise NativeUnavailable(f"the native code was built for {code.target}, and this "
                                f"CPU lacks {', '.join(sorted(missing))}")


def _load_library(key: str, code) -> ctypes.CDLL:
    """The artifact's shared object, loaded once per key in this process."""
    global _private_dir
    with _libs_lock:
        lib = _loaded.get(key)
        if lib is not None:
            return lib
        if _private_dir is None:
            _private_dir = tempfile.mkdtemp(prefix="compiled-native-")  # mode 0700
        fd, path = tempfile.mkstemp(suffix=".so", dir=_private_dir)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(code.shared_object)
            lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        except OSError as e:
            raise NativeUnavailable(f"cannot load the native code: {e}") from None
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        try:
            abi = lib.gc_abi
            abi.restype = ctypes.c_int
            if abi() not in (ABI_VERSION, ABI_SYMBOLIC):
                raise NativeUnavailable(f"the native code speaks ABI {abi()}, this runtime "
                                        f"{ABI_VERSION} and {ABI_SYMBOLIC}")
        except AttributeError:
            raise NativeUnavailable("the shared object has no gc_abi") from None
        _loaded[key] = lib
        return lib


def source_of(artifact) -> str:
    """The generated C of an artifact's native program ("" when none)."""
    if not artifact.HasField("native_program") or not artifact.native_program.source_zlib:
        return ""
    return zlib.decompress(artifact.native_program.source_zlib).decode("utf-8", "replace")


def _bump_version(t: torch.Tensor) -> None:
    """Moves t's version counter as one in-place write would, without
    touching its data (the view is empty)."""
    t.as_strided((0,), (1,)).zero_()


def _restride(t: torch.Tensor, size, stride) -> torch.Tensor:
    """t copied into the layout generated code expects."""
    if tuple(t.shape) != tuple(size):
        raise ArtifactError(f"an ATen call returned shape {tuple(t.shape)}, the program "
                            f"expects {tuple(size)}")
    return torch.empty_strided(size, stride, dtype=t.dtype).copy_(t)


# ---- size symbols (docs/dynamic-shapes.md) --------------------------------

class _Src(str):
    """Python source of a value computed per call (a symbolic size, a tuple
    of sizes): its repr is the source itself, so the generated code formats
    it as it formats a constant (``{size!r}``)."""

    def __repr__(self):
        return str(self)


_SYM_NAME = re.compile(r"s(\d+)\Z")
_SYM_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod)
_SYM_CMPOPS = (ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def sym_python(text: str, nsyms: int, where: str) -> str:
    """An expression of a native program (the graph grammar over s0, s1...)
    as Python source over _s0, _s1..., after checking that it holds only
    what the daemon writes: integers, the program's symbols, + - * // %,
    unary minus, comparisons, and/or/not, min() and max(). The grammar's
    // and % are Python's (floor division, a remainder with the divisor's
    sign). Anything else is an ArtifactError: nothing of an artifact is
    run as code unchecked."""
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ArtifactError(f"{where}: the expression {text!r} does not parse") from None

    def check(node):
        if isinstance(node, ast.Expression):
            return check(node.body)
        if isinstance(node, ast.Constant):
            if type(node.value) not in (int, bool):
                raise ArtifactError(f"{where}: {text!r}: the constant {node.value!r} is "
                                    "not an integer")
            return
        if isinstance(node, ast.Name):
            m = _SYM_NAME.match(node.id)
            if not m or int(m.group(1)) >= nsyms:
                raise ArtifactError(f"{where}: {text!r} names {node.id!r}, not one of the "
                                    f"program's {nsyms} symbols")
            node.id = f"_s{m.group(1)}"
            return
        if isinstance(node, ast.BinOp) and isinstance(node.op, _SYM_BINOPS):
            check(node.left)
            check(node.right)
            return
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Not)):
            check(node.operand)
            return
        if isinstance(node, ast.BoolOp):
            for v in node.values:
                check(v)
            return
        if isinstance(node, ast.Compare) and all(isinstance(o, _SYM_CMPOPS) for o in node.ops):
            check(node.left)
            for c in node.comparators:
                check(c)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("max", "min") and node.args and not node.keywords:
            for a in node.args:
                check(a)
            return
        raise ArtifactError(f"{where}: {text!r} holds {type(node).__name__}, which a size "
                            "expression may not")

    check(tree)
    return ast.unparse(tree)


def _nbytes(item: int, size, stride) -> int:
    """The bytes a tensor of this layout spans (0 without elements)."""
    if 0 in size:
        return 0
    return item * (1 + sum((n - 1) * st for n, st in zip(size, stride)))


def _guard_failed(key: str, kind: str, guard: str, text: str, symbols,
                  input: int = -1) -> GuardFailure:
    """The GuardFailure of a call, named in the debug log (which guard of
    which program, and the symbols' values): the caller compiles again."""
    e = GuardFailure(kind, guard, text, symbols, input)
    _log.debug("compiled: program %s: %s", key[:16] or "?", e)
    return e


def _check_input(t, size, stride, i: int, symbols, fail=GuardFailure) -> None:
    """A tensor input of a program with size symbols has the sizes and
    strides its metadata says (strides of dims of size 1, and of tensors
    without elements, are anyone's), else GuardFailure (INPUT)."""
    if not isinstance(t, torch.Tensor):
        raise fail("INPUT", f"input {i} is a tensor", f"input {i} is a tensor", symbols, i)
    if tuple(t.shape) != size:
        raise fail("INPUT", f"input {i} has sizes {size}",
                   f"input {i} has sizes {tuple(t.shape)}, the program was "
                   f"compiled for {size}", symbols, i)
    if 0 in size:
        return
    got = t.stride()
    for d, (n, a, b) in enumerate(zip(size, got, stride)):
        if n > 1 and a != b:
            raise fail("INPUT", f"input {i} has strides {stride}",
                       f"input {i} has strides {got}, the program was compiled "
                       f"for {stride} (dim {d})", symbols, i)


class NativeIndexError(IndexError, RuntimeError):
    """An index out of range in a native program. Eager raises IndexError
    (embedding, index_select, indexing) or RuntimeError (gather) depending
    on the operator; this is both, so either ``except`` clause catches it."""


def _segment_error(rc: int):
    """The exception for a segment's nonzero return code (GC_SEG_EINDEX 1,
    GC_SEG_ELIBRARY 2: compiler/codegen/cgen.h)."""
    if rc == 2:
        return RuntimeError("a library call of the compiled program failed (oneDNN's "
                            "sgemm: out of memory for its scratch space)")
    return NativeIndexError("index out of range in self (a gather, embedding or "
                            "index argument of the compiled program)")


def build(gen, artifact) -> Any:
    """Generates the native body into `gen` (a runtime._Codegen whose inputs
    are bound) and returns the names of the program outputs. Raises
    NativeUnavailable when this process cannot run the native code."""
    np_ = artifact.native_program
    code = np_.code
    if not available():
        raise NativeUnavailable("COMPILED_NATIVE=0")
    _check_runtime(code)
    lib = _load_library(artifact.key, code)
    body = _NativeBody(gen, np_, lib)
    if profiling():
        body.profile_names = _segment_names(source_of(artifact), len(code.entry_symbols))
    return body.emit()


def profiling() -> bool:
    """Whether COMPILED_PROFILE asks for profiler ranges around segments."""
    return os.environ.get("COMPILED_PROFILE", "0").lower() in ("1", "true", "yes")


_USES_PTRS = re.compile(r"\b_ptrs\b")  # a line of a program body using the pointer table
_SEGMENT_RE = re.compile(r"^int gc_seg(\d+)\(void \*\*p(?:, const int64_t \*s)?\) \{\n(.*?)^\}",
                         re.M | re.S)
_KERNEL_CALL_RE = re.compile(r"\b((?:k|gc_[a-z]+)\d+\w*)\(")


def _segment_names(source: str, count: int) -> List[str]:
    """Profiler range names, one per segment: "compiled seg<i>: <kernels>",
    the kernels read from the generated C (the segment alone when the
    source does not show them)."""
    kernels: Dict[int, List[str]] = {}
    for m in _SEGMENT_RE.finditer(source):
        kernels[int(m.group(1))] = _KERNEL_CALL_RE.findall(m.group(2))
    return [f"compiled seg{i}: {' '.join(kernels.get(i, ())) or '?'}" for i in range(count)]


def _profiled(fn, name: str):
    record = torch.autograd.profiler.record_function

    def segment(*args):
        with record(name):
            return fn(*args)
    return segment


class _NativeBody:
    """Generates the statements of a native program's body."""

    def __init__(self, gen, np_, lib):
        self.gen = gen
        self.np = np_
        self.lib = lib
        self.values = np_.values
        self.places = np_.placements
        if len(self.places) != len(self.values):
            raise ArtifactError(f"native program: {len(self.places)} placements for "
                                f"{len(self.values)} values")
        self.expr: Dict[int, str] = {}
        self.arena_specs = []
        self.arena_names: List[str] = []
        self.lines = gen.lines
        self._slots_of: Optional[Dict[int, List[int]]] = None
        self._slot_set: Optional[set] = None
        self._metas: Dict[int, tuple] = {}
        self.dropped: set = set()
        self.profile_names: Optional[List[str]] = None
        self.nsyms = len(np_.symbols)  # size symbols: sizes are per call

    # -- values ------------------------------------------------------------

    def meta(self, index: int):
        """(dtype, sizes, strides) of tensor value ``index`` (remembered:
        the arena views and the re-lay checks ask for the same values)."""
        hit = self._metas.get(index)
        if hit is None:
            hit = self._metas[index] = self._read_meta(index)
        return hit

    def _read_meta(self, index: int):
        v = self.values[index]
        if v.WhichOneof("kind") != "tensor":
            raise ArtifactError(f"native value {index} is not a tensor")
        t = v.tensor
        dtype = formats.DTYPE_OF.get(t.dtype)
        if dtype is None:
            raise ArtifactError(f"native value {index}: unknown dtype {t.dtype}")
        if any(x.WhichOneof("kind") == "as_expr" for x in list(t.sizes) + list(t.strides)):
            if not self.nsyms:
                raise ArtifactError(f"native value {index} has symbolic sizes and the "
                                    "program no symbols")
            return dtype, self.sym_tuple(t.sizes, index), self.sym_tuple(t.strides, index)
        try:
            size = tuple(int(s.as_int) for s in t.sizes)
            stride = tuple(int(s.as_int) for s in t.strides)
        except Exception:
            raise ArtifactError(f"native value {index} has malformed sizes") from None
        return dtype, size, stride

    def sym(self, text: str, where: str) -> _Src:
        return _Src(f"({sym_python(text, self.nsyms, where)})")

    def sym_tuple(self, items, index: int) -> _Src:
        """A tuple of SymInts as Python source."""
        parts = [self.sym(x.as_expr.expr, f"native value {index}")
                 if x.WhichOneof("kind") == "as_expr" else str(int(x.as_int)) for x in items]
        return _Src("(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")")

    def offset_of(self, pl, where: str):
        """A placement's offset: an int, or the source of its expression."""
        if pl.offset_expr:
            if not self.nsyms:
                raise ArtifactError(f"{where}: a symbolic offset in a program without "
                                    "symbols")
            return self.sym(pl.offset_expr, where)
        return int(pl.offset)

    def extent(self, dtype, size, stride):
        """_extent_bytes, or its source for symbolic sizes."""
        if isinstance(size, _Src) or isinstance(stride, _Src):
            self.gen.globals["_nbytes"] = _nbytes
            item = torch.empty((), dtype=dtype).element_size()
            return _Src(f"_nbytes({item}, {size}, {stride})")
        return arena.extent_bytes(dtype, size, stride)

    def arena_value(self, index: int, base: Optional[int] = None, extra: int = 0) -> str:
        """A view of the arena (precomputed when the arena is made)."""
        dtype, size, stride = self.meta(index)
        root = index if base is None else base
        pl = self.places[root]
        _, bsize, bstride = self.meta(root)
        name = f"_av{len(self.arena_specs)}"
        self.arena_specs.append((dtype, self.offset_of(pl, f"native value {root}"),
                                 self.extent(dtype, bsize, bstride), size, stride, extra))
        self.arena_names.append(name)
        return name

    def value(self, index: int, where: str) -> str:
        if index in self.expr:
            return self.expr[index]
        if not 0 <= index < len(self.values):
            raise ArtifactError(f"{where}: native value {index} out of range")
        pl = self.places[index]
        kind = pl.kind
        if kind == _Placement.PLACEMENT_INPUT:
            if not 0 <= pl.index < len(self.gen.input_expr):
                raise ArtifactError(f"{where}: input {pl.index} out of range")
            if pl.index in self.dropped:
                raise ArtifactError(f"{where}: reads input {pl.index} after its "
                                    "input_free_at")
            e = self.gen.input_expr[pl.index]
        elif kind == _Placement.PLACEMENT_ARENA:
            e = self.arena_value(index)
        elif kind == _Placement.PLACEMENT_VIEW:
            base = pl.index
            if not 0 <= base < len(self.values):
                raise ArtifactError(f"{where}: view of value {base} out of range")
            if self.places[base].kind == _Placement.PLACEMENT_ARENA:
                e = self.arena_value(index, base, self.offset_of(pl, where))
            else:
                _, size, stride = self.meta(index)
                offset = self.offset_of(pl, where)
                # a view of a view: one as_strided of the first base (each
                # level would make a tensor object at every use)
                while self.places[base].kind == _Placement.PLACEMENT_VIEW and \
                        0 <= self.places[base].index < len(self.values) and \
                        self.places[self.places[base].index].kind != _Placement.PLACEMENT_ARENA:
                    more = self.offset_of(self.places[base], where)
                    offset = _Src(f"{offset} + {more}") if \
                        isinstance(offset, _Src) or isinstance(more, _Src) else offset + more
                    base = self.places[base].index
                b = self.value(base, where)
                if offset == 0 and self.values[base].WhichOneof("kind") == "tensor" and \
                        self.meta(base)[1:] == (size, stride):
                    return b  # the base itself
                self.gen.globals["_as_strided"] = torch.as_strided
                e = f"_as_strided({b}, {size!r}, {stride!r}, {b}.storage_offset() + {offset})"
                return e  # made at each use (cheap; never cached across frees)
        elif kind == _Placement.PLACEMENT_OUTPUT or kind == _Placement.PLACEMENT_RESULT or \
                kind == _Placement.PLACEMENT_TEMP:
            raise ArtifactError(f"{where}: native value {index} is read before it exists "
                                "(or after it was freed)")
        else:
            v = self.values[index]
            vk = v.WhichOneof("kind")
            if vk in ("tensors", "optional_tensors"):
                items = getattr(v, vk).items
                return "[" + ", ".join("None" if i == -1 else self.value(i, where)
                                       for i in items) + "]"
            if vk == "sym_expr":  # an integer computed from the symbols
                if not self.nsyms:
                    raise ArtifactError(f"{where}: a symbolic value in a program without "
                                        "symbols")
                return self.sym(v.sym_expr, where)
            if vk == "sym_ints":
                return "[" + ", ".join(
                    str(int(r.int)) if r.WhichOneof("kind") == "int" else
                    self.value(r.value, where) for r in v.sym_ints.items) + "]"
            return self.gen.native_literal(v, vk) if vk else "None"
        self.expr[index] = e
        return e

    # -- inputs dropped early (boxed programs) ----------------------------

    def input_drops(self) -> Dict[int, List[int]]:
        """For a boxed program: instruction index -> the program inputs to
        drop before it (``input_free_at``), leaving out inputs the epilogue
        or an output still reads. Empty for other programs (their caller
        keeps the inputs alive anyway)."""
        gen, np_ = self.gen, self.np
        free_at = np_.input_free_at
        if not gen.boxed or len(free_at) != len(np_.inputs):
            return {}
        kept = gen.inputs_kept()
        for v in np_.outputs:  # outputs that are inputs or views of them
            while 0 <= v < len(self.places) and self.places[v].kind == _Placement.PLACEMENT_VIEW:
                v = self.places[v].index
            if 0 <= v < len(self.places) and self.places[v].kind == _Placement.PLACEMENT_INPUT:
                kept.add(self.places[v].index)
        drops: Dict[int, List[int]] = {}
        for i, at in enumerate(free_at):
            if at < 0 or i in kept or i in gen.bound:
                continue
            if at > len(np_.instructions):
                raise ArtifactError(f"native program: input {i} is freed at instruction "
                                    f"{at}, past the last")
            drops.setdefault(at, []).append(i)
        return drops

    def drop_inputs(self, inputs) -> None:
        """``del`` the inputs' names; a later read of one is an error of
        the artifact (value() refuses it)."""
        if not inputs:
            return
        names = [self.gen.input_expr[i] for i in inputs]
        self.dropped.update(inputs)
        for v, pl in enumerate(self.places):
            if pl.kind == _Placement.PLACEMENT_INPUT and pl.index in self.dropped:
                self.expr.pop(v, None)
        pairs = [f"({i}, {n})" for i, n in zip(inputs, names)]
        self.lines.append("    if _give is not None:")
        self.lines.append(f"        _give.dead({', '.join(pairs)})")
        self.lines.append(f"    del {', '.join(names)}")

    # -- pointer slots -----------------------------------------------------

    def fill_slots(self, indices) -> None:
        """Store the data pointers of the values ``indices`` (just made) in
        the slots that hold them, in slot order."""
        by_value = self._slots_of
        if by_value is None:  # value -> its slots (slot 0 is reserved)
            by_value = self._slots_of = {}
            for i, v in enumerate(self.np.slots):
                if i:
                    by_value.setdefault(v, []).append(i)
        slots = sorted(i for v in set(indices) for i in by_value.get(v, ()))
        for i in slots:
            v = self.np.slots[i]
            self.lines.append(f"    _ptrs[{i}] = {self.value(v, f'slot {i}')}.data_ptr()")

    # -- the body ------------------------------------------------------------

    def emit(self) -> List[str]:
        np_ = self.np
        g = self.gen
        g.globals["_new_output"] = (arena.outputs_allocator() if g.recycle_outputs
                                    else arena.plain_empty_strided)
        g.globals["_segment_error"] = _segment_error
        sym = self.nsyms > 0
        for i, name in enumerate(np_.code.entry_symbols):
            fn = getattr(self.lib, name)
            fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p] if sym else [ctypes.c_void_p]
            fn.restype = ctypes.c_int
            if self.profile_names is not None:
                fn = _profiled(fn, self.profile_names[i])
            g.globals[f"_seg{i}"] = fn
        pool: List[Any] = []
        g.globals["_pool"] = pool
        if sym:
            self.read_symbols()
            plan = np_.memory_plan
            nbytes_src = self.sym(plan.arena_bytes_expr, "the arena size") \
                if plan.arena_bytes_expr else int(plan.arena_bytes)
            nbytes = 0
            paged_in = None
        else:
            nbytes = int(np_.memory_plan.arena_bytes)
            paged_in = (arena.PagedIn(nbytes)
                        if arena.PAGE_IN_BYTES <= nbytes <= arena.PAGE_IN_MAX_BYTES
                        and np_.code.entry_symbols else None)
        head = len(self.lines)
        self.lines.append("try:")
        self.lines.append("    _A = _pool.pop()")
        self.lines.append("except IndexError:")
        self.lines.append("    _A = _new_arena()")
        self.lines.append("try:")
        if sym:  # the pointer table, and the symbols for the segments
            self.lines.append("    _ptrs = _A.p; _syms = _A.s; " +
                              "; ".join(f"_syms[{i}] = _s{i}" for i in range(self.nsyms)))
        else:
            self.lines.append("    _ptrs = _A.p")
        take_at = None  # the arena is made before the first instruction using it
        # inputs and outputs fill their slots first
        ready = set()
        for i, v in enumerate(np_.inputs):
            if self.places[v].kind == _Placement.PLACEMENT_INPUT:
                ready.add(v)
        # outputs an alloc instruction names are made there, the others now
        later = {v for ins in np_.instructions if ins.WhichOneof("kind") == "alloc"
                 for v in ins.alloc.items}
        for v in range(len(self.places)):
            if self.places[v].kind == _Placement.PLACEMENT_OUTPUT and v not in later:
                ready.add(self.new_output(v))
        self.fill_slots(ready)
        drops = self.input_drops()
        for n, ins in enumerate(np_.instructions):
            self.drop_inputs(drops.get(n, ()))
            kind = ins.WhichOneof("kind")
            start, named = len(self.lines), len(self.arena_names)
            if kind == "segment":
                if not 0 <= ins.segment < len(np_.code.entry_symbols):
                    raise ArtifactError(f"native instruction {n}: segment {ins.segment} "
                                        "out of range")
                self.lines.append(f"    _rc = _seg{ins.segment}(_ptrs{', _syms' if sym else ''})")
                self.lines.append("    if _rc:")
                self.lines.append("        raise _segment_error(_rc)")
            elif kind == "kernel":
                made = self.call(n, ins.kernel)
                self.fill_slots(made)
            elif kind == "alloc":
                made = set()
                for v in ins.alloc.items:
                    if not 0 <= v < len(self.places) or v in self.expr or \
                            self.places[v].kind not in (_Placement.PLACEMENT_OUTPUT,
                                                        _Placement.PLACEMENT_TEMP):
                        raise ArtifactError(f"native instruction {n}: alloc of value {v}, "
                                            "not an output or temporary not yet made")
                    made.add(self.new_output(v) if self.places[v].kind == _Placement.PLACEMENT_OUTPUT
                             else self.new_temp(v))
                self.fill_slots(made)
            elif kind == "free":
                names = [self.expr.pop(v) for v in ins.free.items if v in self.expr]
                if names:
                    self.lines.append(f"    del {', '.join(names)}")
            else:
                raise ArtifactError(f"native instruction {n}: unknown kind {kind!r}")
            if take_at is None and (kind == "segment" or len(self.arena_names) > named):
                take_at = start
        self.drop_inputs(drops.get(len(np_.instructions), ()))
        # Generated kernels write mutated inputs directly; torch's version
        # counter must still move (autograd and tests check it): an in-place
        # op on an empty view shares the counter and touches no data.
        for i, info in enumerate(g.program.input_info):
            if info.mutation_type == artifact_pb2.MUTATION_TYPE_MUTATED_IN_GRAPH and \
                    i < len(g.input_expr):
                g.globals["_bump"] = _bump_version
                self.lines.append(f"    _bump({g.input_expr[i]})")
        named = len(self.arena_names)
        outs = [self.value(v, f"program output {i}") for i, v in enumerate(np_.outputs)]
        if take_at is None and len(self.arena_names) > named:
            take_at = len(self.lines)
        body = self.lines[head + 6:]
        if take_at is None and not any(_USES_PTRS.search(line) for line in body):
            # no generated code and no arena view (a program of ATen calls
            # only): no arena, not even its pointer table
            self.lines[head:] = [line[4:] for line in body]
            return outs
        self.lines.append("finally:")
        self.lines.append("    _A.done()")
        self.lines.append("    _pool.append(_A)")
        nslots = len(np_.slots)
        if sym:  # an arena of the call's size, its views made per call
            if take_at is not None:
                take = [f"    _Ab = _A.take({nbytes_src})"]
                g.globals["_arena_view"] = arena.arena_view
                for name, (dtype, off, nb, size, stride, extra) in \
                        zip(self.arena_names, self.arena_specs):
                    take.append(f"    {name} = _arena_view(_Ab, {off}, {nb}, "
                                f"{self.gen.obj(dtype)}, {size!r}, {stride!r}, {extra})")
                self.lines[take_at:take_at] = take
            nsyms = self.nsyms
            g.globals["_new_arena"] = lambda: arena.SymArena(nslots, nsyms)
            return outs
        if take_at is not None:
            names = ", ".join(self.arena_names) + ("," if len(self.arena_names) == 1 else "")
            self.lines.insert(take_at, f"    {names} = _A.take()" if self.arena_names
                              else "    _A.take()")
        specs = tuple(self.arena_specs)
        keep = arena.keep_arena(nbytes)
        g.globals["_new_arena"] = lambda: arena.Arena(nbytes, nslots, specs, keep)
        if paged_in is not None:
            pool.append(arena.Arena(nbytes, nslots, specs, keep, paged_in))
        return outs

    def read_symbols(self) -> None:
        """The symbols of the call from its inputs, the guards, and the
        inputs' sizes and strides against their metadata
        (docs/dynamic-shapes.md): before anything runs."""
        g, np_ = self.gen, self.np
        key = g.artifact.key
        g.globals["_guard_failed"] = lambda *a: _guard_failed(key, *a)
        names = []
        for i, y in enumerate(np_.symbols):
            if y.name != f"s{i}" or not 0 <= y.input < len(g.input_expr):
                raise ArtifactError(f"native program: symbol {i} ({y.name!r}) is read "
                                    f"from input {y.input}, out of range")
            a = g.input_expr[y.input]
            if y.dim >= 0:
                self.lines.append(f"_s{i} = {a}.shape[{int(y.dim)}]")
            else:
                self.lines.append(f"_s{i} = int({a})")
            names.append(f"{y.name!r}: _s{i}")
        syms = "{" + ", ".join(names) + "}"
        kinds = artifact_pb2.GuardKind
        for k, gd in enumerate(np_.guards):
            cond = sym_python(gd.expr, self.nsyms, f"guard {k}")
            kind = kinds.Name(gd.kind).replace("GUARD_KIND_", "") \
                if gd.kind in kinds.values() else "UNKNOWN"
            self.lines.append(f"if not ({cond}):")
            self.lines.append(f"    raise _guard_failed({kind!r}, {gd.expr!r}, {gd.text!r}, "
                              f"{syms})")
        # the inputs with symbolic metadata (others are trusted, as in a
        # static program)
        g.globals["_check_input"] = _check_input
        for i, v in enumerate(np_.inputs):
            if i >= len(g.input_expr) or i in g.bound or \
                    self.places[v].kind != _Placement.PLACEMENT_INPUT:
                continue
            _, size, stride = self.meta(v)
            if isinstance(size, _Src) or isinstance(stride, _Src):
                # the usual case (a tensor of exactly these sizes and
                # strides) inline; _check_input decides the others (free
                # strides of dims of size 1, empty tensors) and fails
                a = g.input_expr[i]
                g.globals["_Tensor"] = torch.Tensor
                self.lines.append(f"if not (isinstance({a}, _Tensor) and {a}.shape == {size!r} "
                                  f"and {a}.stride() == {stride!r}):")
                self.lines.append(f"    _check_input({a}, {size!r}, {stride!r}, {i}, {syms}, "
                                  "_guard_failed)")
        # a boxed caller's list is emptied only once the call is accepted
        # (on a GuardFailure it still holds the inputs, to run elsewhere)
        g.clear_args_at = len(self.lines)

    def new_output(self, v: int) -> int:
        """Allocates program output value v (recycled memory when large)."""
        dtype, size, stride = self.meta(v)
        nbytes = self.extent(dtype, size, stride)
        args = f"{size!r}, {stride!r}, {self.gen.obj(dtype)}, {nbytes}"
        if self.gen.boxed:  # the caller may donate inputs (Donation)
            self.lines.append(f"    o{v} = _new_output({args}) if _give is None "
                              f"else _give.output({args}, _new_output)")
        else:
            self.lines.append(f"    o{v} = _new_output({args})")
        self.expr[v] = f"o{v}"
        return v

    def new_temp(self, v: int) -> int:
        """Allocates TEMP value v: plain memory, like eager's temporaries
        (not the output pool: it is dropped within the call)."""
        dtype, size, stride = self.meta(v)
        self.gen.globals["_empty_strided"] = torch.empty_strided
        line = f"    t{v} = _empty_strided({size!r}, {stride!r}, dtype={self.gen.obj(dtype)})"
        if self.gen.boxed:  # the caller may donate inputs (Donation)
            line += (f" if _give is None else _give.temp({size!r}, {stride!r}, "
                     f"{self.gen.obj(dtype)}, {self.extent(dtype, size, stride)})")
        self.lines.append(line)
        self.expr[v] = f"t{v}"
        return v

    def call(self, n: int, k) -> set:
        """A kernel call; returns the values it made."""
        g = self.gen
        where = f"native instruction {n}"
        ops = self.np.operators
        if not 0 <= k.op < len(ops):
            raise ArtifactError(f"{where}: operator {k.op} out of range")
        op = g.native_op(k.op, ops[k.op], k.args)
        args = []
        for a in k.args:
            e = self.value(a.value, f"{where}, argument {a.name!r}")
            args.append(f"{a.name}={e}" if a.keyword else e)
        call = f"{op}({', '.join(args)})"
        targets, made = [], set()
        for o in k.outputs:
            if o == -1:
                targets.append("_")
                continue
            if not 0 <= o < len(self.values):
                raise ArtifactError(f"{where}: output {o} out of range")
            pl = self.places[o]
            v = self.values[o]
            vk = v.WhichOneof("kind")
            if vk == "tensors":
                names = []
                for item in v.tensors.items:
                    if item == -1:
                        names.append("_")
                    else:
                        self.expr[item] = f"v{item}"
                        names.append(f"v{item}")
                        made.add(item)
                targets.append("[" + ", ".join(names) + "]")
            elif pl.kind == _Placement.PLACEMENT_RESULT:
                self.expr[o] = f"v{o}"
                targets.append(f"v{o}")
                made.add(o)
            else:
                targets.append("_")  # an out= buffer: it already exists
        comment = f"  # {ops[k.op].name}"
        if all(t == "_" for t in targets):
            self.lines.append(f"    {call}{comment}")
        elif len(targets) == 1:
            self.lines.append(f"    {targets[0]} = {call}{comment}")
        else:
            self.lines.append(f"    [{', '.join(targets)}] = {call}{comment}")
        # Generated code reads results with the strides eager produced; an
        # ATen call that lays its result out differently here is re-laid.
        slots = self._slot_set
        if slots is None:
            slots = self._slot_set = set(self.np.slots)
        for v in sorted(made):
            if v in slots and self.values[v].WhichOneof("kind") == "tensor":
                _, size, stride = self.meta(v)
                g.globals["_restride"] = _restride
                self.lines.append(f"    if v{v}.stride() != {stride!r} or v{v}.shape != {size!r}:")
                self.lines.append(f"        v{v} = _restride(v{v}, {size!r}, {stride!r})")
        return made


