"""Run artifacts: a ``compiled.v1.Program`` becomes a Python function.

The contract is ``docs/artifact.md``. A program is straight-line code over a
value table, so instead of interpreting it on every call (looking values up
by index, dispatching on argument kinds, reading protobuf fields), the
runtime *generates Python source* for it once, at load time, and ``exec``s
it, as ``torch.fx`` does for its graphs:

- each operator name (``aten::add.Tensor``) is resolved once to its
  ``OpOverload`` (``torch.ops.aten.add.Tensor``; no overload name means
  ``.default``) and the generated code calls the overload's underlying
  builtin directly;
- constants are literals in the source when Python can spell them (ints,
  finite floats, bools, strings, None), else globals of the generated
  function (lists, dtypes, devices, non-finite floats);
- arguments are passed positionally or by keyword as the program says;
  ``Tensor[]`` results are unpacked into their element slots
  (``[v9, v10] = split(...)``);
- then the epilogue of "Mutation and aliasing (version 0.2)": inputs
  mutated out of graph receive their new values (in input order), and only
  then are the user outputs rebuilt from ``output_info`` (the caller's input
  object itself, views of it replayed from a view chain or ``as_strided``,
  views of intermediate bases or of other user outputs, or the program
  output as it is);
- finally the user outputs are returned, either as a tuple or in the pytree
  structure the caller asked for (``out_spec``), built by a literal
  expression (``return ({'a': v16, 'l': [v9, v10]}, v13)``).

An empty ``input_info`` means every input is NOT_MUTATED, an empty
``output_info`` that every program output is a NON_ALIAS user output: that
is what version 0.1 programs and programs with ``functional == false``
mean (they run the original ATen ops, in-place ones included, on the
caller's own tensors).

The source of a loaded program is in :attr:`LoadedProgram.source`, and is
registered with ``linecache`` so tracebacks through it show the line that
failed.
"""

from __future__ import annotations

import keyword
import linecache
import logging
import math
import re
import itertools
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.utils._pytree as pytree

from . import codecache, formats
from . import native as native_module  # `native` is load()'s flag
from .errors import ArtifactError, SpecializationError
from .v1 import artifact_pb2, graph_pb2

__all__ = ["LoadedProgram", "SUPPORTED_MAJOR", "load", "parse_artifact", "resolve_operator"]

_log = logging.getLogger("compiled.runtime")

# The artifact format major version this runtime runs (minor versions only
# add fields, so any minor is accepted).
SUPPORTED_MAJOR = 0

_MUTATED_OUT = artifact_pb2.MUTATION_TYPE_MUTATED_OUT_GRAPH
_KNOWN_MUTATION_TYPES = (artifact_pb2.MUTATION_TYPE_NOT_MUTATED,
                         artifact_pb2.MUTATION_TYPE_MUTATED_IN_GRAPH,
                         artifact_pb2.MUTATION_TYPE_MUTATED_OUT_GRAPH)
_AS_IS = (artifact_pb2.OUTPUT_TYPE_NON_ALIAS, artifact_pb2.OUTPUT_TYPE_UNSAFE_VIEW_ALIAS,
          artifact_pb2.OUTPUT_TYPE_CUSTOM_FUNCTION_VIEW)
_OF_INTERMEDIATE = (artifact_pb2.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE,
                    artifact_pb2.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE_SAVE_AS_OUTPUT)


# ---------------------------------------------------------------------------
# Artifacts and operators.
# ---------------------------------------------------------------------------

def parse_artifact(data: Union[bytes, bytearray, memoryview, artifact_pb2.Artifact]) -> artifact_pb2.Artifact:
    """Parse artifact bytes (or take a message as is) and check its version.

    Raises:
        ArtifactError: the bytes are not an Artifact, or its major version is
            not :data:`SUPPORTED_MAJOR`.
    """
    if isinstance(data, artifact_pb2.Artifact):
        artifact = data
    else:
        artifact = artifact_pb2.Artifact()
        try:
            artifact.ParseFromString(bytes(data))
        except Exception as e:
            raise ArtifactError(f"cannot parse the artifact: {e}") from None
    major, minor = artifact.version.major, artifact.version.minor
    if major != SUPPORTED_MAJOR:
        raise ArtifactError(
            f"artifact {artifact.key[:16] or '(no key)'} has format version {major}.{minor}; "
            f"this runtime runs major version {SUPPORTED_MAJOR} only "
            "(use a compiled client that matches the daemon)")
    return artifact


class _SymIntOperator:
    """Integer arithmetic on SymInts as Dynamo's graphs record it (FX
    targets ``operator.mul``, ...), which graphs name ``_operator::mul``
    (docs/graph-format.md, "SymInt arithmetic"): Python's own operator,
    with a schema-like ``_schema`` of one return."""

    class _Schema:
        def __init__(self, name):
            self.returns = [None]
            self.arguments = []
            self.name = name

    def __init__(self, name: str, fn):
        self._schema = self._Schema(name)
        self._op = fn
        self._overloadname = "default"

    def __call__(self, *args):
        return self._op(*args)


_SYM_INT_OPERATORS = {
    "_operator::add": operator.add, "_operator::sub": operator.sub,
    "_operator::mul": operator.mul, "_operator::floordiv": operator.floordiv,
    "_operator::mod": operator.mod, "_operator::neg": operator.neg,
}


def resolve_operator(name: str) -> torch._ops.OpOverload:
    """``"aten::add.Tensor"`` -> ``torch.ops.aten.add.Tensor``;
    ``"aten::relu"`` -> ``torch.ops.aten.relu.default``.

    Raises:
        ArtifactError: this torch has no such operator or overload.
    """
    if name in _SYM_INT_OPERATORS:
        return _SymIntOperator(name, _SYM_INT_OPERATORS[name])
    namespace, sep, rest = name.partition("::")
    opname, _, overload = rest.partition(".")
    if not sep or not namespace or not opname:
        raise ArtifactError(f"malformed operator name {name!r} (expected ns::name[.overload])")
    try:
        packet = getattr(getattr(torch.ops, namespace), opname)
        return getattr(packet, overload or "default")
    except Exception:
        raise ArtifactError(f"operator {name!r} does not exist in this torch "
                            f"({torch.__version__})") from None


def direct_binding(overload: torch._ops.OpOverload, positional: int,
                   keywords) -> Optional[Any]:
    """torch's own Python binding of ``overload``'s function
    (``torch._C._VariableFunctions``) when a call passing ``positional``
    arguments by position and ``keywords`` by name can only mean this
    overload, with these arguments, else None.

    That holds for an aten function's ``default`` and ``out`` overloads
    (the binding picks ``out`` exactly when ``out=`` is given) when no other
    overload could take the call's arguments (torch 2's ``bmm.dtype`` needs
    an ``out_dtype``),
    called with the keyword-only arguments by keyword and the others by
    position (the binding names ``self`` ``input``), leaving out only
    arguments whose default is None: the binding's other defaults are not
    always the schema's (torch 1.13: ``binary_cross_entropy_with_logits``'s
    ``reduction``, ``slice_scatter``'s ``step``). The binding converts the
    arguments in C++; the overload's
    boxed entry point builds an argument stack on the heap first: a call
    through the binding costs about 0.6 us and a few hundred bytes of heap
    less, and the same kernel runs.
    """
    if isinstance(overload, _SymIntOperator):
        return None
    packet = overload.overloadpacket
    name = overload._overloadname
    if not packet._qualified_op_name.startswith("aten::") or name not in ("default", "out"):
        return None
    for other in packet.overloads():
        if other not in ("default", "out") and \
                _could_bind(getattr(packet, other)._schema, positional, keywords):
            return None  # the binding might pick that one (torch 2's bmm.dtype)
    args = overload._schema.arguments
    given = {a.name for a in args[:positional] if not a.kwarg_only}
    if len(given) != positional or len(set(keywords)) != len(keywords):
        return None
    for a in args:
        by_name = a.name in keywords
        if by_name and not a.kwarg_only:
            return None
        if not (by_name or a.name in given) and \
                (not a.has_default_value() or a.default_value is not None):
            return None
    if not set(keywords) <= {a.name for a in args}:
        return None
    return getattr(torch._C._VariableFunctions, packet.__name__, None)


def _could_bind(schema, positional: int, keywords) -> bool:
    """Whether a call with ``positional`` arguments by position and
    ``keywords`` by name could match ``schema``: it fills every argument
    without a default, and passes none it does not have."""
    args = schema.arguments
    if positional > sum(1 for a in args if not a.kwarg_only):
        return False
    names = {a.name for a in args}
    if not set(keywords) <= names:
        return False
    given = {a.name for a in args[:positional]} | set(keywords)
    return all(a.has_default_value() or a.name in given for a in args)


def _checked_overload(entry, what: str) -> torch._ops.OpOverload:
    """The overload an operator entry of an artifact names, checked against
    the schema the `what` ("program", "native program") was built for."""
    overload = resolve_operator(entry.name)
    if isinstance(overload, _SymIntOperator):
        return overload
    if entry.schema and entry.schema != str(overload._schema):
        raise ArtifactError(f"operator {entry.name}: the {what} was built for the schema "
                            f"{entry.schema!r}, this torch ({torch.__version__}) has "
                            f"{str(overload._schema)!r}")
    return overload


def _boxed(overload: torch._ops.OpOverload) -> Any:
    """The overload's boxed entry point (its own __call__ is a Python frame
    around this builtin)."""
    return getattr(overload, "_op", overload)


def _arg_shape(call_args) -> Tuple[int, List[str]]:
    """(how many arguments a call passes by position, the names it passes
    by keyword)."""
    return (sum(1 for a in call_args if not a.keyword),
            [a.name for a in call_args if a.keyword])


# ---------------------------------------------------------------------------
# The loaded program.
# ---------------------------------------------------------------------------

class LoadedProgram:
    """A program ready to run.

    Call it with the program's inputs in order (the graph's input order:
    parameters, buffers, constants, user inputs), leaving out the CONSTANT
    inputs bound at load time. It returns the user outputs: a tuple, or the
    structure given as ``out_spec`` to :func:`load`.

    Attributes:
        fn: the function to call (calling it skips one Python frame): the
            generated function, or, for a native program, the chooser
            between it and the ATen program (:mod:`compiled.choice`).
        native_fn: the generated function itself.
        source: its Python source.
        key: the artifact's cache key.
        version: ``(major, minor)`` of the artifact format.
        num_inputs: how many program inputs there are.
        arg_inputs: indices of the program inputs the caller passes, in order.
        input_kinds: ``graph_pb2.InputKind`` of every program input.
        functional, training: as in the Program message.
        num_user_outputs: how many user outputs the program has.
    """

    def __init__(self, fn, source: str, key: str, version: Tuple[int, int], num_inputs: int,
                 arg_inputs: List[int], input_kinds: List[int], functional: bool, training: bool,
                 num_user_outputs: int):
        self.fn = fn
        self.native_fn = fn        # the generated function (fn may choose, compiled.choice)
        self.source = source
        self.key = key
        self.version = version
        self.num_inputs = num_inputs
        self.arg_inputs = arg_inputs
        self.input_kinds = input_kinds
        self.functional = functional
        self.training = training
        self.num_user_outputs = num_user_outputs
        self.native = False        # runs native code (set by load)
        self.native_reason = None  # why not, when it does not
        self.summary: Dict[str, Any] = {}
        self.artifact = None

    @property
    def c_source(self) -> str:
        """The generated C of the artifact's native program ("" when none)."""
        return native_module.source_of(self.artifact) if self.artifact is not None else ""

    def __call__(self, *inputs):
        return self.fn(*inputs)

    def __repr__(self) -> str:
        return (f"<LoadedProgram {self.key[:12] or '?'} v{self.version[0]}.{self.version[1]}: "
                f"{len(self.arg_inputs)} inputs, {self.num_user_outputs} outputs>")


def load(artifact: Union[bytes, artifact_pb2.Artifact], *,
         constants: Union[None, Sequence[Any], Dict[int, Any]] = None,
         out_spec: Optional[pytree.TreeSpec] = None, native: bool = True,
         boxed: bool = False, recycle_outputs: bool = True) -> LoadedProgram:
    """Turn an artifact into a :class:`LoadedProgram`.

    Args:
        artifact: artifact bytes or a parsed ``artifact_pb2.Artifact``.
        constants: values bound into the program for its CONSTANT inputs,
            which the caller then leaves out: a sequence, one per CONSTANT
            input in input order (as :func:`compiled.trace` returns them), or
            a dict ``{program input index: value}``. None binds nothing.
        out_spec: a ``torch.utils._pytree`` TreeSpec with one leaf per user
            output: the program returns the outputs in that structure.
            None returns a tuple.
        native: run the artifact's native program when it has one and this
            process can (:mod:`compiled.native`); else, or when native code
            cannot run here (logged once), the ATen program.
        boxed: the function takes one list of the inputs and empties it
            (the caller hands over its references); a native program then
            drops each input after the last instruction reading it
            (``NativeProgram.input_free_at``), so that memory only the
            list held is freed during the call. Used for backward programs,
            whose saved values eager's autograd frees as it goes.
        recycle_outputs: large outputs of a native program come from the
            recycling pool (compiled.native); False allocates them as eager
            would (training programs: their outputs, saved values and
            gradients, die at different times, and blocks the pool keeps
            would add to the peak).

    Raises:
        ArtifactError: unknown major version, malformed program, unknown
            operator, or a feature this runtime does not have.
    """
    artifact = parse_artifact(artifact)
    program = artifact.program
    kinds = [spec.kind for spec in program.inputs]
    if constants is None:
        bound: Dict[int, Any] = {}
    elif isinstance(constants, dict):
        bound = dict(constants)
    else:
        constant_inputs = [i for i, k in enumerate(kinds) if k == graph_pb2.INPUT_KIND_CONSTANT]
        constants = list(constants)
        if len(constants) != len(constant_inputs):
            raise ArtifactError(f"the program has {len(constant_inputs)} CONSTANT inputs, "
                                f"{len(constants)} constants were given")
        bound = dict(zip(constant_inputs, constants))
    for index in bound:
        if not 0 <= index < len(kinds):
            raise ArtifactError(f"constant bound to input {index}, the program has {len(kinds)}")
    native_reason = None
    fn = source = None
    gen = None
    if artifact.HasField("native_program") and not artifact.native_program.code.entry_symbols:
        # no generated code: the native program is ATen calls too, so the
        # ATen program runs (nothing to load, nothing to choose between)
        native_reason = _no_code_reason(artifact.native_program.summary)
    elif native and artifact.HasField("native_program"):
        gen = _Codegen(artifact, bound, out_spec, boxed, recycle_outputs)
        try:
            fn, source = gen.build(native=True)
        except native_module.NativeUnavailable as e:
            native_reason = str(e)
            _warn_native_once(native_reason)
            fn = None
    elif artifact.HasField("native_program"):
        native_reason = "native code not requested"
    else:
        native_reason = "the artifact has no native code" + "".join(
            f" ({d.message})" for d in artifact.diagnostics if "native" in d.message)
    if fn is None:
        gen = _Codegen(artifact, bound, out_spec, boxed, recycle_outputs)
        fn, source = gen.build()
    loaded = LoadedProgram(fn, source, artifact.key,
                           (artifact.version.major, artifact.version.minor),
                           len(kinds), [i for i in range(len(kinds)) if i not in bound], kinds,
                           program.functional, program.training, gen.num_user_outputs)
    loaded.native = native_reason is None
    loaded.native_reason = native_reason
    loaded.summary = _summary(artifact, loaded.native, native_reason)
    loaded.artifact = artifact
    if loaded.native and not _draws_random_numbers(program):
        # native code or the ATen program, whichever is faster here
        # (compiled.choice); random programs keep native code, so that
        # their numbers under a seed do not depend on what was measured
        from . import choice  # on first use: statistics imports decimal

        def build_aten():
            aten_fn, _ = _Codegen(artifact, bound, out_spec, boxed, recycle_outputs).build()
            return aten_fn
        loaded.fn = choice.choose(artifact.key, fn, build_aten, loaded.summary)
    return loaded


def _draws_random_numbers(program) -> bool:
    """Whether any operator of the ATen program is tagged as drawing from
    torch's generator (dropout's bernoulli, rand, randn...)."""
    for entry in program.operators:
        try:
            op = resolve_operator(entry.name)
        except ArtifactError:
            return True  # unknown: assume the worst
        if _SEEDED in getattr(op, "tags", ()):
            return True
    return False


_SEEDED = torch.Tag.nondeterministic_seeded


_warned_native = set()


def _warn_native_once(reason: str) -> None:
    if reason not in _warned_native:
        _warned_native.add(reason)
        _log.warning("compiled: running ATen programs instead of native code: %s", reason)


def _no_code_reason(s) -> str:
    """Why a native program without generated code runs as ATen calls."""
    return (f"nothing was lowered into generated code: its {s.nodes} nodes are "
            f"{s.extern} library calls, {s.fallback} fallbacks and {s.native} views "
            "or copies, all ATen's")


def _summary(artifact, native: bool, reason: Optional[str] = None) -> Dict[str, Any]:
    """What summary() reports for a program: graph nodes, and how many were
    lowered into generated kernels, run as library calls, or fell back;
    ``runs``: "native" when generated code runs (with ATen calls for library
    operators and fallbacks), "aten" when only ATen operators do, with the
    ``reason``. A native program without generated code keeps its counts
    (0 kernels) and runs "aten"."""
    program = artifact.program
    nodes = len(program.instructions)
    np_ = artifact.native_program if artifact.HasField("native_program") else None
    if np_ is not None and (native or not np_.code.entry_symbols):
        s = np_.summary
        out = {"nodes": s.nodes, "native": s.native, "extern": s.extern,
               "fallback": s.fallback, "kernels": s.kernels,
               "fallback_ops": list(s.fallback_ops), "local_buffers": s.local_buffers,
               "arena_bytes": int(np_.memory_plan.arena_bytes) if native else 0,
               "target": np_.code.target, "runs": "native" if native else "aten"}
    else:
        out = {"nodes": nodes, "native": 0, "extern": 0, "fallback": nodes, "kernels": 0,
               "fallback_ops": [], "local_buffers": 0, "arena_bytes": 0, "target": "",
               "runs": "aten"}
    if not native:
        out["reason"] = reason or "ATen program"
    return out


# ---------------------------------------------------------------------------
# Code generation.
# ---------------------------------------------------------------------------

_program_counter = itertools.count()


# The names the ATen program gives its intermediates (output_target).
_INTERMEDIATE = re.compile(r"\bv\d+\b")


class _Codegen:
    """Generates the source of one program's function.

    Names in the generated code: ``a<i>`` program input i, ``v<i>`` value i
    once an instruction wrote it, ``u<j>`` user output j, ``_op<k>``
    operator k (``_vf<k>`` its direct binding, see direct_binding),
    ``_c<i>`` constant globals, ``_k<i>`` bound constant inputs.
    """

    def __init__(self, artifact: artifact_pb2.Artifact, bound: Dict[int, Any], out_spec,
                 boxed: bool = False, recycle_outputs: bool = True):
        self.artifact = artifact
        self.boxed = boxed
        self.recycle_outputs = recycle_outputs
        self.program = artifact.program
        self.values = self.program.values
        self.bound = bound
        # boxed: where the body empties the caller's list (None: first);
        # a native program with size symbols checks its guards before
        self.clear_args_at: Optional[int] = None
        self.out_spec = out_spec
        self.globals: Dict[str, Any] = {"__builtins__": __builtins__}
        self.lines: List[str] = []
        self.expr: Dict[int, str] = {}      # value index -> expression to read it now
        self.const_names: Dict[int, str] = {}   # value index -> its constant global
        self.object_names: Dict[int, str] = {}  # id(obj) -> global name (held objects)
        self.ops: Dict[int, str] = {}       # operator index -> global name
        self.overloads: Dict[int, torch._ops.OpOverload] = {}
        self.native_overloads: Dict[int, torch._ops.OpOverload] = {}
        self.num_user_outputs = 0

    # -- globals -----------------------------------------------------------

    def obj(self, value: Any, prefix: str = "_c") -> str:
        """A global name bound to ``value`` (one per distinct object)."""
        name = self.object_names.get(id(value))
        if name is None:
            name = f"{prefix}{len(self.globals)}"
            self.globals[name] = value
            self.object_names[id(value)] = name
        return name

    def op(self, index: int, call_args=None) -> str:
        """The global name of operator ``index`` (resolved on first use):
        given a call's arguments (``Argument`` messages), the name of its
        direct binding when it has one for such a call."""
        if call_args is not None:
            self.op(index)
            fn = direct_binding(self.overloads[index], *_arg_shape(call_args))
            if fn is None:
                return self.ops[index]
            name = f"_vf{index}"
            self.globals[name] = fn
            return name
        if index in self.ops:
            return self.ops[index]
        operators = self.program.operators
        if not 0 <= index < len(operators):
            raise ArtifactError(f"operator index {index} out of range ({len(operators)} operators)")
        overload = _checked_overload(operators[index], "program")
        name = f"_op{index}"
        self.globals[name] = _boxed(overload)
        self.ops[index] = name
        self.overloads[index] = overload
        return name

    def native_op(self, index: int, entry, call_args) -> str:
        """The global name of the native program's operator `index`, for a
        call with these arguments (its direct binding when it has one for
        such a call)."""
        overload = self.native_overloads.get(index)
        if overload is None:
            overload = _checked_overload(entry, "native program")
            self.native_overloads[index] = overload
        fn = direct_binding(overload, *_arg_shape(call_args))
        name = f"_nvf{index}" if fn is not None else f"_nop{index}"
        if name not in self.globals:
            self.globals[name] = fn if fn is not None else _boxed(overload)
        return name

    def native_literal(self, v: artifact_pb2.Value, kind: str) -> str:
        """A constant of the native program (its own value table)."""
        if kind == "none":
            return "None"
        if kind == "bool":
            return repr(bool(v.bool))
        if kind == "int":
            return repr(int(v.int))
        if kind == "float" and math.isfinite(v.float):
            return repr(float(v.float))
        if kind == "string":
            return repr(v.string)
        return self.obj(self.constant_object(-1, v, kind))

    # -- values ------------------------------------------------------------

    def value(self, index: int, where: str) -> str:
        """An expression reading value ``index`` at this point of the code."""
        if index in self.expr:
            return self.expr[index]
        if not 0 <= index < len(self.values):
            raise ArtifactError(f"{where}: value index {index} out of range "
                                f"({len(self.values)} values)")
        v = self.values[index]
        kind = v.WhichOneof("kind")
        if kind == "tensors":
            return "[" + ", ".join(self.value(i, where) for i in v.tensors.items) + "]"
        if kind == "optional_tensors":
            return "[" + ", ".join("None" if i == -1 else self.value(i, where)
                                   for i in v.optional_tensors.items) + "]"
        if kind == "sym_ints":
            return "[" + ", ".join(
                repr(int(r.int)) if r.WhichOneof("kind") == "int" else self.value(r.value, where)
                for r in v.sym_ints.items) + "]"
        if kind == "tensor":
            raise ArtifactError(f"{where}: value {index} (a tensor) is read before any "
                                "instruction writes it")
        if kind == "sym_int":
            raise ArtifactError(f"{where}: value {index} is a symbolic integer; this runtime "
                                "runs static-shape programs only")
        if kind is None:
            raise ArtifactError(f"{where}: value {index} is empty")
        return self.literal(index, v, kind)

    def literal(self, index: int, v: artifact_pb2.Value, kind: str) -> str:
        """A constant value as a source literal or a global name."""
        if kind == "none":
            return "None"
        if kind == "bool":
            return repr(bool(v.bool))
        if kind == "int":
            return repr(int(v.int))
        if kind == "float":
            if math.isfinite(v.float):
                return repr(float(v.float))
        elif kind == "string":
            return repr(v.string)
        if index not in self.const_names:
            self.const_names[index] = self.obj(self.constant_object(index, v, kind))
        return self.const_names[index]

    def constant_object(self, index: int, v: artifact_pb2.Value, kind: str) -> Any:
        if kind == "float":
            return float(v.float)
        if kind in ("ints", "floats", "bools", "strings"):
            return list(getattr(v, kind).items)
        if kind == "scalar_type":
            return self._enum(formats.DTYPE_OF, v.scalar_type, "ScalarType", index)
        if kind == "layout":
            return self._enum(formats.LAYOUT_OF, v.layout, "Layout", index)
        if kind == "memory_format":
            return self._enum(formats.MEMORY_FORMAT_OF, v.memory_format, "MemoryFormat", index)
        if kind == "device":
            d = v.device
            return torch.device(d.type, d.index) if d.has_index else torch.device(d.type)
        raise ArtifactError(f"value {index}: unsupported constant kind {kind!r}")

    @staticmethod
    def _enum(table, number, what, index):
        try:
            return table[number]
        except KeyError:
            raise ArtifactError(f"value {index}: {what} {number} is unknown to this torch") from None

    # -- the function --------------------------------------------------------

    def build(self, native: bool = False):
        """Generates the function. With `native`, the body runs the
        artifact's native program (compiled.native), else the ATen program;
        the input checks and the epilogue are the same."""
        program = self.program
        for ins in program.instructions:
            if ins.WhichOneof("kind") != "kernel":
                raise ArtifactError("the program uses native code segments, which this runtime "
                                    "does not run yet")
        params = self.bind_inputs()
        self.specialization_checks()
        if native:
            outs = native_module.build(self, self.artifact)
            if len(outs) != len(program.outputs):
                raise ArtifactError(f"the native program has {len(outs)} outputs, the program "
                                    f"{len(program.outputs)}")
        else:
            body = len(self.lines)
            for n, ins in enumerate(program.instructions):
                self.kernel(n, ins.kernel)
            outs = [self.value(o.value, f"program output {i}")
                    for i, o in enumerate(program.outputs)]
            self.free_after_last_use(body, outs)
        user = self.epilogue(outs)
        self.num_user_outputs = len(user)
        self.lines.append(f"return {self.output_expr(user)}")

        serial = next(_program_counter)
        key = self.artifact.key[:12] or "nokey"
        filename = f"<compiled program {key} #{serial}>"
        header = [f"def program({'_args, _give=None' if self.boxed else ', '.join(params)}):",
                  f"    # artifact {self.artifact.key or '(no key)'} "
                  f"v{self.artifact.version.major}.{self.artifact.version.minor}, "
                  f"functional={program.functional}, training={program.training}"]
        if self.boxed:
            if params:
                header.append(f"    {', '.join(params)}, = _args")
            if self.clear_args_at is None:
                header.append("    _args.clear()")
            else:  # after the guards: a call they refuse keeps its inputs
                self.lines.insert(self.clear_args_at, "_args.clear()")
        source = "\n".join(header + ["    " + line for line in self.lines]) + "\n"
        code = codecache.compile_cached(source, filename)
        scope = dict(self.globals)
        exec(code, scope)
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("loaded %s:\n%s", filename, source)
        return scope["program"], source

    def free_after_last_use(self, body: int, outs: List[str]) -> None:
        """Deletes each intermediate of the ATen program (``v<index>``, the
        names output_target gives results) right after the last line of the
        body that reads it, as eager frees a temporary when its last user
        returns: without it, every intermediate lived until the program
        returned (a segmentation network at batch 8: 548 MiB at its peak
        against eager's 61). Outputs, which the epilogue reads, stay."""
        assigned = {e for e in self.expr.values() if _INTERMEDIATE.fullmatch(e)}
        kept = {m for e in outs for m in _INTERMEDIATE.findall(e)}
        last: Dict[str, int] = {}
        for i in range(body, len(self.lines)):
            code = self.lines[i].split("  # ", 1)[0]
            for name in _INTERMEDIATE.findall(code):
                last[name] = i
        ends: Dict[int, List[str]] = {}
        for name, i in last.items():
            if name in assigned and name not in kept:
                ends.setdefault(i, []).append(name)
        for i in sorted(ends, reverse=True):
            names = sorted(ends[i], key=lambda v: int(v[1:]))
            self.lines.insert(i + 1, "del " + ", ".join(names))

    def inputs_kept(self) -> set:
        """Program inputs the epilogue reads after the body: inputs it
        mutates, and bases of outputs that are inputs or their views."""
        kept = set()
        for i, info in enumerate(self.program.input_info):
            if info.mutation_type != artifact_pb2.MUTATION_TYPE_NOT_MUTATED or info.mutates_data \
                    or info.mutates_metadata:
                kept.add(i)
        for info in self.program.output_info:
            if info.output_type in (artifact_pb2.OUTPUT_TYPE_IS_INPUT,
                                    artifact_pb2.OUTPUT_TYPE_ALIAS_OF_INPUT):
                kept.add(info.base_index)
        return kept

    def bind_inputs(self) -> List[str]:
        """Parameters of the generated function; input value expressions."""
        params = []
        self.input_expr: List[str] = []
        for i, spec in enumerate(self.program.inputs):
            if not 0 <= spec.value < len(self.values):
                raise ArtifactError(f"input {i}: value index {spec.value} out of range")
            if i in self.bound:
                name = self.obj(self.bound[i], "_k")
            else:
                name = f"a{i}"
                params.append(name)
            self.input_expr.append(name)
            self.expr.setdefault(spec.value, name)
        return params

    def specialization_checks(self) -> None:
        """``specialized`` inputs: the caller must pass the baked constant."""
        for i, spec in enumerate(self.program.inputs):
            if not spec.specialized:
                continue
            v = self.values[spec.value]
            kind = v.WhichOneof("kind")
            a = self.input_expr[i]
            if kind == "none":
                cond = f"{a} is not None"
                expected = None
            elif kind == "bool":
                cond = f"{a} is not {bool(v.bool)!r}"
                expected = bool(v.bool)
            elif kind in ("int", "float", "string"):
                expected = {"int": int, "float": float, "string": str}[kind](getattr(v, kind))
                typ = {"int": "int", "float": "float", "string": "str"}[kind]
                if kind == "float" and math.isnan(expected):
                    cond = f"{a}.__class__ is not float or {a} == {a}"
                else:
                    cond = f"{a}.__class__ is not {typ} or {a} != {self.literal(spec.value, v, kind)}"
            else:
                raise ArtifactError(f"input {i} is specialized to a {kind!r} value; only None, "
                                    "bool, int, float and str inputs can be specialized")
            self.globals["_SpecializationError"] = SpecializationError
            self.lines.append(f"if {cond}:")
            self.lines.append(f"    raise _SpecializationError({i}, {self.obj(expected)}, {a})")

    def kernel(self, n: int, k: artifact_pb2.KernelCall) -> None:
        where = f"instruction {n}"
        op = self.op(k.op, k.args)
        overload = self.overloads[k.op]
        args: List[str] = []
        seen_keyword = False
        for a in k.args:
            e = self.value(a.value, f"{where}, argument {a.name!r}")
            if a.keyword:
                seen_keyword = True
                if a.name.isidentifier() and not keyword.iskeyword(a.name):
                    args.append(f"{a.name}={e}")
                else:
                    args.append(f"**{{{a.name!r}: {e}}}")
            elif seen_keyword:
                raise ArtifactError(f"{where}: positional argument {a.name!r} after a keyword")
            else:
                args.append(e)
        call = f"{op}({', '.join(args)})"
        returns = overload._schema.returns
        if len(k.outputs) != len(returns):
            raise ArtifactError(f"{where}: {len(k.outputs)} outputs for "
                                f"{self.program.operators[k.op].name}, whose schema has "
                                f"{len(returns)} returns")
        targets = [self.output_target(o, where) for o in k.outputs]
        comment = f"  # {self.program.operators[k.op].name}"
        if k.node or n == 0:
            comment += f" (node {k.node})"
        if all(t == "_" for t in targets):
            self.lines.append(call + comment)
        elif len(targets) == 1:
            self.lines.append(f"{targets[0]} = {call}{comment}")
        else:
            self.lines.append(f"[{', '.join(targets)}] = {call}{comment}")

    def output_target(self, index: int, where: str) -> str:
        """The assignment target for one result, registering what it writes."""
        if index == -1:
            return "_"
        if not 0 <= index < len(self.values):
            raise ArtifactError(f"{where}: output value {index} out of range")
        v = self.values[index]
        kind = v.WhichOneof("kind")
        if kind in ("tensors", "optional_tensors"):
            items = getattr(v, kind).items
            return "[" + ", ".join(self.output_target(i, where) for i in items) + "]"
        name = f"v{index}"
        self.expr[index] = name
        return name

    # -- mutation and alias epilogue ----------------------------------------

    def epilogue(self, outs: List[str]) -> List[str]:
        """Apply out-of-graph input mutations, then rebuild user outputs.
        Returns the expressions of the user outputs."""
        program = self.program
        n_out = len(outs)
        n_mut = program.num_mutated_outputs
        n_bases = program.num_intermediate_bases
        if not program.output_info:
            if n_mut or n_bases:
                raise ArtifactError(f"num_mutated_outputs={n_mut}, num_intermediate_bases="
                                    f"{n_bases} but no output_info")
            n_user = n_out
        else:
            n_user = len(program.output_info)
            if n_mut < 0 or n_bases < 0 or n_mut + n_user + n_bases != n_out:
                raise ArtifactError(f"the program has {n_out} outputs, the layout says "
                                    f"{n_mut} mutated + {n_user} user + {n_bases} bases")
        self.input_mutations(outs, n_mut)
        if not program.output_info:
            return outs
        return self.user_outputs(outs, n_mut, n_user, n_bases)

    def input_mutations(self, outs: List[str], n_mut: int) -> None:
        infos = self.program.input_info
        if not infos:
            return
        if len(infos) != len(self.program.inputs):
            raise ArtifactError(f"{len(infos)} input_info entries for "
                                f"{len(self.program.inputs)} inputs")
        used = set()
        for i, info in enumerate(infos):
            if info.mutation_type not in _KNOWN_MUTATION_TYPES:
                raise ArtifactError(f"input {i}: unknown mutation_type {info.mutation_type}")
            if info.mutation_type != _MUTATED_OUT:
                continue
            where = f"input {i}"
            k = info.mutated_output
            if not 0 <= k < n_mut:
                raise ArtifactError(f"{where}: mutated_output {k} is not one of the "
                                    f"{n_mut} leading outputs")
            if k in used:
                raise ArtifactError(f"{where}: mutated_output {k} used twice")
            used.add(k)
            if info.mutates_storage_metadata:
                raise ArtifactError(f"{where}: storage mutations (set_, resize_) of inputs "
                                    "are not supported")
            if not (info.mutates_data or info.mutates_metadata):
                raise ArtifactError(f"{where}: MUTATED_OUT_GRAPH, but neither its data nor "
                                    "its metadata is mutated")
            a, new = self.input_expr[i], outs[k]
            self.lines.append(f"# {where}: mutated out of graph "
                              f"(data={info.mutates_data}, metadata={info.mutates_metadata})")
            if info.mutates_metadata:
                # A leaf that requires grad refuses in-place ops under grad
                # mode; eager's metadata change happened under no_grad then.
                self.globals["_no_grad"] = torch.no_grad
                self.lines += [
                    f"if {a}.requires_grad and {a}.is_leaf:",
                    "    with _no_grad():",
                    f"        {a}.as_strided_({new}.size(), {new}.stride(), {new}.storage_offset())",
                    "else:",
                    f"    {a}.as_strided_({new}.size(), {new}.stride(), {new}.storage_offset())",
                ]
            if info.mutates_data:
                if info.mutations_hidden_from_autograd or info.mutations_under_no_grad_or_inference_mode:
                    self.lines.append(f"{a}.detach().copy_({new})")
                else:
                    self.lines += [f"if {a}.requires_grad and {a}.is_leaf:",
                                   f"    {a}.detach().copy_({new})",
                                   "else:",
                                   f"    {a}.copy_({new})"]
        if len(used) != n_mut:
            raise ArtifactError(f"num_mutated_outputs is {n_mut}, but {len(used)} inputs are "
                                "MUTATED_OUT_GRAPH")

    def user_outputs(self, outs: List[str], n_mut: int, n_user: int, n_bases: int) -> List[str]:
        infos = self.program.output_info
        n_inputs = len(self.program.inputs)
        names = [f"u{j}" for j in range(n_user)]
        done = [False] * n_user
        # BASE_IS_USER_OUTPUT outputs wait for their base; others go first.
        pending = list(range(n_user))
        while pending:
            progressed = False
            for j in list(pending):
                info = infos[j]
                where = f"user output {j}"
                t = info.output_type
                if t == artifact_pb2.OUTPUT_TYPE_ALIAS_OF_INTERMEDIATE_BASE_IS_USER_OUTPUT:
                    b = info.base_index
                    if not 0 <= b < n_user or b == j:
                        raise ArtifactError(f"{where}: base user output {b} out of range")
                    if not done[b]:
                        continue
                    self.view(names[j], names[b], info, where)
                elif t in _AS_IS:
                    po = info.program_output
                    if not 0 <= po < len(outs):
                        raise ArtifactError(f"{where}: program_output {po} out of range")
                    names[j] = outs[po]
                elif t == artifact_pb2.OUTPUT_TYPE_IS_INPUT:
                    names[j] = self.input_base(info, n_inputs, where)
                elif t == artifact_pb2.OUTPUT_TYPE_ALIAS_OF_INPUT:
                    self.view(names[j], self.input_base(info, n_inputs, where), info, where)
                elif t in _OF_INTERMEDIATE:
                    b = info.base_index
                    if not 0 <= b < n_bases:
                        raise ArtifactError(f"{where}: intermediate base {b} out of range "
                                            f"({n_bases} bases)")
                    self.view(names[j], outs[n_mut + n_user + b], info, where)
                else:
                    raise ArtifactError(f"{where}: unknown output_type {t}")
                done[j] = True
                pending.remove(j)
                progressed = True
            if not progressed:
                raise ArtifactError(f"user outputs {pending} are views of each other in a cycle")
        return names

    def input_base(self, info, n_inputs: int, where: str) -> str:
        b = info.base_index
        if not 0 <= b < n_inputs:
            raise ArtifactError(f"{where}: base input {b} out of range ({n_inputs} inputs)")
        return self.input_expr[b]

    def view(self, target: str, base: str, info, where: str) -> None:
        """``target = <a view of base>`` by view replay or as_strided, then
        AOTAutograd's requires_grad fix-up."""
        if info.has_view_chain:
            self.lines.append(f"{target} = {base}")
            for s, step in enumerate(info.view_chain):
                self.lines.append(f"{target} = {self.view_step(step, target, f'{where}, view step {s}')}")
        else:
            st = info.as_strided
            self.globals["_as_strided"] = torch.as_strided
            self.lines.append(f"{target} = _as_strided({base}, {tuple(st.size)!r}, "
                              f"{tuple(st.stride)!r}, {int(st.storage_offset)})")
        if info.requires_grad:
            self.lines += [f"if not {target}.requires_grad:",
                           f"    {target}.requires_grad_(True)"]
        else:
            self.lines += [f"if {target}.requires_grad:",
                           f"    {target} = {target}.detach()"]

    def view_step(self, step: artifact_pb2.ViewStep, current: str, where: str) -> str:
        op = self.op(step.op)
        args = []
        viewed = False
        for a in step.args:
            if a.value == -1:
                e = current
                viewed = True
            else:
                e = self.value(a.value, f"{where}, argument {a.name!r}")
            if a.keyword:
                args.append(f"{a.name}={e}" if a.name.isidentifier() and not keyword.iskeyword(a.name)
                            else f"**{{{a.name!r}: {e}}}")
            else:
                args.append(e)
        if not viewed:
            raise ArtifactError(f"{where}: no argument is the viewed tensor (value -1)")
        call = f"{op}({', '.join(args)})"
        returns = self.overloads[step.op]._schema.returns
        returns_list = len(returns) == 1 and returns[0].type.kind() == "ListType"
        if returns_list:
            if step.item < 0:
                raise ArtifactError(f"{where}: {self.program.operators[step.op].name} returns "
                                    "a list; the step must pick an item")
            return f"{call}[{step.item}]"
        if step.item > 0:
            raise ArtifactError(f"{where}: item {step.item} of "
                                f"{self.program.operators[step.op].name}, which returns one tensor")
        return call

    # -- output structure ---------------------------------------------------

    def output_expr(self, user: List[str]) -> str:
        if self.out_spec is None:
            return "(" + "".join(f"{u}, " for u in user) + ")"
        if self.out_spec.num_leaves != len(user):
            raise ArtifactError(f"the output structure has {self.out_spec.num_leaves} leaves, "
                                f"the program {len(user)} user outputs")
        return self.tree_expr(self.out_spec, iter(user))

    def tree_expr(self, spec: pytree.TreeSpec, leaves) -> str:
        """A literal expression building the pytree ``spec`` from ``leaves``."""
        if spec.is_leaf() or spec.type is None:
            return next(leaves)
        children = [self.tree_expr(c, leaves) for c in spec.children()]
        t = spec.type
        if t is tuple:
            return "(" + "".join(c + ", " for c in children) + ")"
        if t is list or t.__name__ == "immutable_list":
            return "[" + ", ".join(children) + "]"
        if t is dict or t.__name__ == "immutable_dict":
            keys = [self.key_expr(k) for k in spec.context]
            return "{" + ", ".join(f"{k}: {c}" for k, c in zip(keys, children)) + "}"
        # namedtuple, OrderedDict, torch.return_types, custom nodes: the
        # registered unflatten function.
        node = pytree.SUPPORTED_NODES[t]
        return (f"{self.obj(node.unflatten_fn)}([{', '.join(children)}], "
                f"{self.obj(spec.context)})")

    def key_expr(self, key: Any) -> str:
        if key is None or isinstance(key, (bool, int, str)):
            return repr(key)
        return self.obj(key)

