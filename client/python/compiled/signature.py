"""The signature of a call: what a compiled callable's programs are keyed by.

A :class:`~compiled.frontend.CompiledFunction` looks every call up by its
signature (grad and inference mode, the process-wide settings eager
depends on, the submodules' training flags, the arguments' structure and,
per input, what the program was captured for; the frontend's module
docstring lists it) and captures and compiles again on a miss. This
module computes the parts of it, says in words what changed between two
(the recompile reason), and reads a module's parameters and buffers at
call time (:class:`StateLayout`). It is on every call's path: the
functions are written for speed (unbound accessors, ``map``, generated
code).
"""

from __future__ import annotations

import operator
import sys
from typing import Any, Dict, List, Sequence

import torch
import torch.utils._pytree as pytree

from . import codecache

__all__ = ["StateLayout", "call_signature", "flatten_args", "global_state", "sizeless",
           "what_changed"]

_capture = sys.modules["compiled.capture"]

_Tensor = torch.Tensor
_is_autocast_enabled = torch.is_autocast_enabled
_get_autocast_dtype = torch.get_autocast_dtype
_get_default_dtype = torch.get_default_dtype
_deterministic = torch.are_deterministic_algorithms_enabled


def global_state() -> tuple:
    """The process-wide settings that change what eager computes, as Dynamo
    guards on them: CPU autocast (on, and to which dtype; its casts are
    part of the captured graph), the default dtype (factories without a
    dtype), and deterministic algorithms (which kernels eager picks). Grad
    and inference mode are in the signature too, separately."""
    return (_get_autocast_dtype("cpu") if _is_autocast_enabled("cpu") else None,
            _get_default_dtype(), _deterministic())


# ---------------------------------------------------------------------------
# The signature of a call.
# ---------------------------------------------------------------------------

# Unbound accessors: map() over them runs the loop in C, with no attribute
# lookup per tensor.
_meta = operator.attrgetter("dtype", "shape", "device", "requires_grad")
_stride = torch._C._TensorBase.stride
_storage_offset = torch._C._TensorBase.storage_offset
_data_ptr = torch._C._TensorBase.data_ptr


def call_signature(state: Sequence[torch.Tensor], flat: Sequence[Any]) -> tuple:
    """The part of a call's signature that describes its inputs: module
    state first, then the flattened user inputs; see compiled.frontend's docstring.

    A tensor is described by dtype, shape, strides, storage offset, device,
    requires_grad (for user inputs: 0, or 1 + is_leaf when it requires grad)
    and the index of the first input with the same storage. The storage is
    identified by its address, ``data_ptr() - storage_offset() *
    element_size()``: the storage's own ``data_ptr()``, without building the
    TypedStorage object ``Tensor.storage()`` makes in torch 1.13 (~1.5 us).

    Module state (tensors by construction, often a hundred of them) is
    described column by column with ``map`` over unbound accessors, and its
    sharing pattern is None when no two state tensors share a storage.
    """
    n = len(state)
    if n:
        ptrs = tuple(map(_data_ptr, state))
        offsets = tuple(map(_storage_offset, state))
        if any(offsets):
            bases = tuple(p - o * t.element_size() for p, o, t in zip(ptrs, offsets, state))
        else:
            bases = ptrs
        # Reversed, so that a storage maps to the first tensor using it.
        first = dict(zip(reversed(bases), range(n - 1, -1, -1)))
        pattern = None if len(first) == n else tuple(map(first.__getitem__, bases))
        state_sig = (tuple(map(_meta, state)), tuple(map(_stride, state)), offsets, pattern)
    else:
        first = {}
        state_sig = None
    setdefault = first.setdefault
    sig = [state_sig]
    append = sig.append
    i = n
    for t in flat:
        if isinstance(t, _Tensor):
            off = t.storage_offset()
            append((t.dtype, t.shape, t.stride(), off, t.device,
                    (t.is_leaf + 1) if t.requires_grad else 0,
                    setdefault(t.data_ptr() - off * t.element_size(), i)))
        elif t.__class__ in _SCALARS:
            # A NaN is unequal to itself: give it a stable stand-in.
            append((t.__class__, t if t == t else "nan"))
        else:
            append((t.__class__, id(t)))  # capture will refuse it
        i += 1
    return tuple(sig)


_SCALARS = {int, float, bool, str, type(None)}


_SETTINGS = ("autocast", "the default dtype", "deterministic algorithms")


def what_changed(old: tuple, new: tuple, state_paths: Sequence[str]) -> str:
    """In words, the first difference between two call signatures (keys of
    CompiledFunction._entries): the recompile reason logged at INFO."""
    grad0, inf0, glob0, flags0, struct0, sig0 = old
    grad1, inf1, glob1, flags1, struct1, sig1 = new
    if grad0 != grad1:
        return f"grad mode {'on' if grad1 else 'off'} (was {'on' if grad0 else 'off'})"
    if inf0 != inf1:
        return f"inference mode {'on' if inf1 else 'off'}"
    for name, a, b in zip(_SETTINGS, glob0, glob1):
        if a != b:
            return f"{name} {b} (was {a})"
    if flags0 != flags1:
        return "the module's training flags or hooks"
    if struct0 != struct1:
        return "the structure of the arguments (their number, nesting or kinds)"
    if sig0[0] != sig1[0]:
        return _state_change(sig0[0], sig1[0], state_paths)
    for i, (a, b) in enumerate(zip(sig0[1:], sig1[1:])):
        if a == b:
            continue
        if len(a) == 7 and len(b) == 7:   # tensors
            for what, x, y in zip(("dtype", "shape", "strides", "storage offset", "device",
                                   "requires_grad", "storage sharing"), a, b):
                if x != y:
                    if what == "shape":
                        x, y = tuple(x), tuple(y)
                        if len(x) == len(y):  # which dimensions, old and new sizes
                            dims = "; ".join(f"dimension {d} is {n} (was {o})" for d, (o, n)
                                             in enumerate(zip(x, y)) if o != n)
                            return f"argument {i}: shape {y} (was {x}): {dims}"
                    return f"argument {i}: {what} {y} (was {x})"
        return f"argument {i}: {b[1]!r} (was {a[1]!r})"
    return "a new signature"


def sizeless(key: tuple) -> tuple:
    """A call's signature (a key of CompiledFunction._entries) without the
    sizes, strides and offsets of its user tensors (their ranks kept):
    what a program with size symbols must match besides its guards."""
    *head, sig = key
    return (*head, sig[0], tuple((e[0], len(e[1]), e[4], e[5], e[6]) if len(e) == 7 else e
                                 for e in sig[1:]))


def _state_change(a, b, state_paths: Sequence[str]) -> str:
    if a is None or b is None:
        return "the module's parameters and buffers"
    metas0, strides0, offsets0, _ = a
    metas1, strides1, offsets1, _ = b
    for i, (m0, m1, s0, s1) in enumerate(zip(metas0, metas1, strides0, strides1)):
        if m0 != m1 or s0 != s1:
            name = state_paths[i] if i < len(state_paths) else f"#{i}"
            return (f"module state '{name}': {m1[0]} {tuple(m1[1])} (was {m0[0]} "
                    f"{tuple(m0[1])})" if m0 != m1 else f"module state '{name}': strides")
    return "how the module's parameters and buffers share storage"


def _hashable_spec(spec: pytree.TreeSpec):
    """A hashable description of a pytree structure (TreeSpec is not)."""
    if spec.is_leaf():
        return None
    context = spec.context
    if isinstance(context, list):
        context = tuple(context)
    try:
        hash(context)
    except TypeError:
        context = repr(context)
    return (spec.type, context, tuple(_hashable_spec(c) for c in spec.children()))


def flatten_args(args: tuple):
    """(flat leaves, hashable structure). Positional tensors alone, the usual
    case, are their own flattening."""
    for a in args:
        if not isinstance(a, _Tensor):
            break
    else:
        return args, len(args)
    leaves, spec = pytree.tree_flatten(args)
    return leaves, _hashable_spec(spec)


# ---------------------------------------------------------------------------
# Module state: read parameters and buffers at call time, fast.
# ---------------------------------------------------------------------------

class StateLayout:
    """How to read a module's state in capture's order (parameters in
    ``named_parameters()`` order, then buffers in ``named_buffers()``
    order, tied tensors once).

    ``state_paths`` maps every path reaching a state tensor (tied ones
    included) to its index, as capture's ``_module_state`` returns it.

    ``read()`` is generated code: it checks that every submodule is still
    where it was (else returns None: the layout is stale) and returns
    ``(state tensors, training flags of every submodule)``. It raises
    KeyError when a parameter or buffer was deleted.
    """

    def __init__(self, module: torch.nn.Module):
        owners: List[Any] = []
        params, buffers, self.state_paths = _capture._module_state(module, owners)
        self.paths = [path for path, _, _ in params] + [path for path, _, _ in buffers]
        self.num_params = len(params)
        scope: Dict[str, Any] = {}
        names: Dict[int, str] = {}

        def bind(obj, prefix):
            name = names.get(id(obj))
            if name is None:
                name = f"{prefix}{len(scope)}"
                scope[name] = obj
                names[id(obj)] = name
            return name

        modules = list(module.modules())
        checks = []
        for m in modules:
            for child_name, child in m._modules.items():
                if child is not None:
                    checks.append(f"{bind(m._modules, '_D')}[{child_name!r}] is not "
                                  f"{bind(child, '_M')}")
        reads = []
        for i, (owner, attr) in enumerate(owners):
            table = owner._parameters if i < self.num_params else owner._buffers
            reads.append(f"{bind(table, '_T')}[{attr!r}]")
        flags = [f"{bind(m, '_M')}.training" for m in modules]
        lines = ["def read():"]
        if checks:
            lines.append("    if (" + "\n            or ".join(checks) + "):")
            lines.append("        return None")
        lines.append("    return ((" + "".join(r + ", " for r in reads) + "),")
        lines.append("            (" + "".join(f + ", " for f in flags) + "))")
        self.source = "\n".join(lines) + "\n"
        exec(codecache.compile_cached(self.source, "<compiled state reader>"), scope)
        self.read = scope["read"]
        # What identifies the layout: the state tensors' names and kinds,
        # and the module objects.
        self.identity = (tuple(self.paths), self.num_params, tuple(id(m) for m in modules))
