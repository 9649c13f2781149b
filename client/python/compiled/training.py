"""Training: a compiled forward and a compiled backward.

When :func:`compiled.compile` sees a call whose outputs require grad (grad
mode on, a parameter or an input requiring grad), it compiles the program
as AOTAutograd does (docs/training.md):

1. **Joint trace.** The function runs once on copies of its inputs, with
   grad mode on, followed by ``torch.autograd.grad`` of the outputs that
   require grad with respect to the inputs that require grad, given
   *tangents* (the incoming gradients) as extra inputs; ``make_fx`` records
   all of it as one ATen graph (:func:`split` below). Autograd itself
   writes the backward: every operator's derivative is the one eager
   PyTorch would use.
2. **Partition** (:func:`_partition`). The nodes that do not depend on a
   tangent can run in the forward; the forward keeps those the outputs
   need, every node with a side effect (an in-place write, a random draw,
   batch norm's running statistics) and whatever depends on them. Forward
   nodes the backward reads are *saved*: the forward graph returns them
   after the user outputs, the backward graph takes them first, then the
   tangents. Forward-side nodes only the backward needs (a weight's
   transpose, a mask) are recomputed there from saved values instead of
   being kept alive between the passes. Saved values are ordered as the
   graph is, so the same program always gives the same two graphs.
3. **Compile** both graphs through the daemon as inference programs (two
   keys, both cached), so both get native code.
4. **Run** them inside a ``torch.autograd.Function``: its forward runs the
   forward program (grad mode is off there) and saves what it returns for
   the backward; its backward hands the saved values and the incoming
   gradients (made contiguous) over to the backward program, which drops
   each saved value after its last use.

Programs this scheme does not describe exactly are refused here with
:class:`NotSplittable` (the caller then compiles one training program that
runs through ATen, which autograd records as it does eager code): outputs
that share memory with an input, inputs requiring grad that the program
mutates, inputs that share memory with each other, outputs that are not
tensors, outputs that share memory with each other (a result and its
``detach()``), and programs with no output requiring grad.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Set

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from .arena import Donation

__all__ = ["NotSplittable", "Split", "split", "TrainingStep"]

_capture = sys.modules["compiled.capture"]
_Tensor = torch.Tensor
_SEEDED = torch.Tag.nondeterministic_seeded

# Operators that write arguments their schema does not mark as written:
# batch norm's running statistics (as compiler/opfacts.def says).
_UNANNOTATED_WRITERS = {
    torch.ops.aten.native_batch_norm.default,
    torch.ops.aten.native_batch_norm.out,
}


class NotSplittable(Exception):
    """The program cannot be run as a compiled forward and backward; the
    message says why."""


class NothingToDifferentiate(NotSplittable):
    """No output requires grad and no input that requires grad is written:
    autograd has nothing to record, so the program is an inference program
    (compiled natively) even with grad mode on."""


@dataclasses.dataclass
class Split:
    """The forward and backward graphs of one training signature.

    Attributes:
        fw: forward GraphModule: takes the primals (module state, then the
            flattened user inputs), returns the user outputs then the saved
            values computed in the forward.
        bw: backward GraphModule: takes the saved values, then the primals
            it reads (``saved_primals``), then one tangent per output that
            requires grad; returns ``grads``' gradients.
        num_outs: number of user outputs (flattened).
        needs_grad: per user output, whether it requires grad.
        saved_primals: indices of the primals the backward reads.
        grad_inputs: per backward output, the primal it is the gradient of.
        out_spec: the user outputs' pytree structure.
        num_saved: how many saved values the forward computes.
    """

    fw: Any
    bw: Any
    num_outs: int
    needs_grad: List[bool]
    saved_primals: List[int]
    grad_inputs: List[int]
    out_spec: Any
    num_saved: int


def _storage_base(t: torch.Tensor) -> int:
    return t.data_ptr() - t.storage_offset() * t.element_size()


def split(fn, module: Optional[torch.nn.Module], state_paths: Dict[str, int], n_state: int,
          user_spec, flat_real: Sequence[Any]) -> Split:
    """Trace ``fn`` (or ``module``) jointly with its backward on copies of
    ``flat_real`` (module state, then the flattened user inputs) and
    partition the graph; see the module docstring. The caller forks the RNG
    state around this call. Raises :class:`NotSplittable`."""
    box: List[Any] = [None]

    def flat_fn(*primals):
        user = pytree.tree_unflatten(list(primals[n_state:]), user_spec)
        if module is None:
            out = fn(*user)
        else:
            state = {path: primals[i] for path, i in state_paths.items()}
            out = _capture.call_with_state(module, state, tuple(user))
        leaves, box[0] = pytree.tree_flatten(out)
        return leaves

    # Probe: what the outputs are, and what the program does to its inputs.
    tensors = [(i, t) for i, t in enumerate(flat_real) if isinstance(t, _Tensor)]
    bases = [_storage_base(t) for _, t in tensors]
    if len(set(bases)) != len(bases):
        raise NotSplittable("two inputs share memory")
    copies = _capture._copy_tensors(list(flat_real))
    before = [c._version if isinstance(c, _Tensor) else 0 for c in copies]
    with torch.enable_grad():
        outs = flat_fn(*copies)
    for j, o in enumerate(outs):
        if not isinstance(o, _Tensor):
            raise NotSplittable(f"output {j} is a {type(o).__name__}, not a tensor")
    needs_grad = [o.requires_grad for o in outs]
    written = [i for i, c in enumerate(copies)
               if isinstance(c, _Tensor) and c.requires_grad and c._version != before[i]]
    if not any(needs_grad):
        if not written:
            raise NothingToDifferentiate("no output requires grad")
        raise NotSplittable("no output requires grad")
    input_bases = {_storage_base(c) for c in copies if isinstance(c, _Tensor)}
    output_bases: Dict[int, int] = {}
    for j, o in enumerate(outs):
        base = _storage_base(o)
        if base in input_bases:
            raise NotSplittable(f"output {j} shares memory with an input")
        if base in output_bases:
            raise NotSplittable(f"outputs {output_bases[base]} and {j} share memory")
        output_bases[base] = j
    if written:
        raise NotSplittable(f"input {written[0]} requires grad and is written by the program")
    out_spec = box[0]
    tangents = [torch.zeros(o.shape, dtype=o.dtype, device=o.device)
                for o, n in zip(outs, needs_grad) if n]
    del outs, copies

    def joint(primals, tangents):
        outs = flat_fn(*primals)
        needed = [o for o, n in zip(outs, needs_grad) if n]
        wrt = [p for p in primals if isinstance(p, _Tensor) and p.requires_grad]
        grads = torch.autograd.grad(needed, wrt, tangents, allow_unused=True)
        return outs, list(grads)

    copies = _capture._copy_tensors(list(flat_real))
    before = [c._version if isinstance(c, _Tensor) else 0 for c in copies]
    from torch.fx.experimental.proxy_tensor import make_fx
    try:
        with torch.enable_grad():
            gm = make_fx(joint, decomposition_table=_capture.DECOMPOSITIONS)(copies, tangents)
    except Exception as e:
        raise _capture._tracing_error(
            f"tracing the forward and backward of {_capture._describe(fn)} failed: "
            f"{type(e).__name__}: {e}", e) from e
    mutated = {i for i, c in enumerate(copies)
               if isinstance(c, _Tensor) and c._version != before[i]}
    wrt = [i for i, c in enumerate(flat_real) if isinstance(c, _Tensor) and c.requires_grad]
    return _partition(gm, len(flat_real), len(needs_grad), needs_grad, wrt, mutated, out_spec)


def _writes(node: fx.Node) -> bool:
    """Whether ``node`` has a side effect: it writes an argument, or draws
    random numbers."""
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return False
    if target in _UNANNOTATED_WRITERS or _SEEDED in target.tags:
        return True
    return any(a.alias_info is not None and a.alias_info.is_write
               for a in target._schema.arguments)



def _reads_then_written(nodes: List[fx.Node], order: Dict[fx.Node, int]) -> Set[fx.Node]:
    """The nodes that read a value (or a view of its memory) which a later
    node writes in place."""
    root: Dict[fx.Node, fx.Node] = {}  # a view's base, transitively

    def base(n: fx.Node) -> fx.Node:
        while n in root:
            n = root[n]
        return n

    last_write: Dict[fx.Node, int] = {}  # base -> order of its last write
    for n in nodes:
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        schema = n.target._schema
        ins = [a for a in n.args if isinstance(a, fx.Node)]
        if schema.returns and schema.returns[0].alias_info is not None and ins:
            root[n] = ins[0]  # a view, or an in-place result: the same memory
        for a, arg in zip(n.args, schema.arguments):
            if isinstance(a, fx.Node) and arg.alias_info is not None and arg.alias_info.is_write:
                last_write[base(a)] = order[n]
    out: Set[fx.Node] = set()
    if not last_write:
        return out
    for n in nodes:
        if n.op != "call_function":
            continue
        for a in n.all_input_nodes:
            w = last_write.get(base(a))
            if w is not None and w > order[n]:
                out.add(n)
                break
    return out


def _partition(gm: fx.GraphModule, n_primals: int, num_outs: int, needs_grad: List[bool],
               wrt: List[int], mutated: Set[int], out_spec) -> Split:
    graph = gm.graph
    nodes = list(graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:n_primals], placeholders[n_primals:]
    output = nodes[-1]
    flat_out = output.args[0]
    fw_outs, grads = list(flat_out[:num_outs]), list(flat_out[num_outs:])
    if len(grads) != len(wrt):
        raise NotSplittable(f"the joint graph has {len(grads)} gradients for {len(wrt)} "
                            "inputs requiring grad")
    for j, o in enumerate(fw_outs):
        if not isinstance(o, fx.Node):
            raise NotSplittable(f"output {j} is a constant of the trace")
    order = {n: k for k, n in enumerate(nodes)}
    primal_index = {p: i for i, p in enumerate(primals)}

    # Nodes that depend on a tangent belong to the backward; the others may
    # run in the forward. Nodes reading a mutated primal must run there.
    backward_only: Set[fx.Node] = set(tangents)
    reads_mutated: Set[fx.Node] = {primals[i] for i in mutated}
    for n in nodes:
        if n.op in ("placeholder", "output"):
            continue
        ins = n.all_input_nodes
        if any(a in backward_only for a in ins):
            backward_only.add(n)
        if any(a in reads_mutated for a in ins):
            reads_mutated.add(n)

    # Nodes that read a value an in-place operator writes later (through
    # any view of it): run later, in the backward, they would read the
    # written value. hardswish_ saves a clone of its input for its
    # backward; recomputing that clone in the backward read hardswish_'s
    # result instead, and every gradient below it was wrong.
    reads_then_written = _reads_then_written(nodes, order)

    # The forward: what the outputs need, and every side effect.
    forward: Set[fx.Node] = set()

    def take_forward(root: fx.Node) -> None:
        stack = [root]
        while stack:
            n = stack.pop()
            if n in forward or n.op == "placeholder":
                continue
            forward.add(n)
            stack.extend(n.all_input_nodes)

    for o in fw_outs:
        take_forward(o)
    for n in nodes:
        if n.op == "call_function" and n not in backward_only and _writes(n):
            take_forward(n)

    # The backward: what the gradients need. A forward-side node it reaches
    # that the forward does not compute is recomputed in the backward,
    # unless it must run once, in order (a side effect, a read of a mutated
    # primal) or is an item of a forward node's tuple result.
    backward: Set[fx.Node] = set()
    stack = [g for g in grads if isinstance(g, fx.Node)]
    stack += [n for n in nodes if n in backward_only and n.op == "call_function" and _writes(n)]
    while stack:
        n = stack.pop()
        if n in backward or n in forward or n.op == "placeholder":
            continue
        if n not in backward_only and (
                n in reads_mutated or n in reads_then_written
                or (n.target is operator.getitem and n.args[0] in forward)):
            take_forward(n)
            continue
        backward.add(n)
        stack.extend(n.all_input_nodes)

    # Saved values: forward nodes and primals the backward reads, in graph
    # order. get_attr constants are read where they are needed.
    saved_nodes: List[fx.Node] = []
    saved_primals: List[fx.Node] = []
    seen: Set[fx.Node] = set()
    for n in sorted(backward, key=order.__getitem__):
        for a in n.all_input_nodes:
            if a in seen or a in backward or a.op == "get_attr":
                continue
            seen.add(a)
            if a.op == "placeholder":
                if a in primal_index:
                    saved_primals.append(a)
            elif a in forward:
                saved_nodes.append(a)
    saved_nodes.sort(key=order.__getitem__)
    saved_primals.sort(key=order.__getitem__)
    saved_nodes = _save_masks_as_bools(graph, saved_nodes, forward, backward, fw_outs)
    nodes = list(graph.nodes)  # with the nodes that added
    for a in saved_nodes:
        if a.op == "call_function" and a.target is not operator.getitem:
            schema = getattr(a.target, "_schema", None)
            if schema is not None and (len(schema.returns) != 1
                                       or schema.returns[0].type.kind() != "TensorType"):
                raise NotSplittable(f"the backward reads {a.name}, which is not one tensor")

    def build(inputs: List[fx.Node], body: Set[fx.Node], outputs: List[Any]) -> fx.GraphModule:
        g = fx.Graph()
        env: Dict[fx.Node, fx.Node] = {}
        for n in inputs:
            p = g.placeholder(n.name)
            p.meta = dict(n.meta)
            env[n] = p
        for n in nodes:
            if n in env:
                continue
            if n in body or (n.op == "get_attr" and any(u in body for u in n.users)):
                env[n] = g.node_copy(n, env.__getitem__)
        g.output([env[o] if isinstance(o, fx.Node) else o for o in outputs])
        g.lint()
        return fx.GraphModule(gm, g)

    fw = build(primals, forward, fw_outs + saved_nodes)
    grad_nodes = [(i, g) for i, g in zip(wrt, grads) if g is not None]
    bw = build(saved_nodes + saved_primals + tangents, backward,
               [g for _, g in grad_nodes])
    for i, g in grad_nodes:
        if not isinstance(g, fx.Node):
            raise NotSplittable(f"the gradient of input {i} is a constant of the trace")
    return Split(fw, bw, num_outs, needs_grad, [primal_index[p] for p in saved_primals],
                 [i for i, _ in grad_nodes], out_spec, len(saved_nodes))


def _mask_scale(n: fx.Node) -> Optional[float]:
    """The scale c when n is dropout's mask, ``bernoulli_(t, q).div_(c)``
    (ATen's dropout on CPU): every element is 0 or exactly 1 / c."""
    aten = torch.ops.aten
    if n.op != "call_function" or n.target is not aten.div_.Scalar or len(n.args) != 2:
        return None
    b, c = n.args
    if not isinstance(b, fx.Node) or b.target is not aten.bernoulli_.float or \
            not isinstance(c, (int, float)) or isinstance(c, bool) or not 0 < c < float("inf"):
        return None
    meta = n.meta.get("tensor_meta")
    if meta is None or not meta.dtype.is_floating_point:
        return None
    # nothing may write the mask after div_ (the backward would read the
    # written values, the saved bools the earlier ones)
    if any(_writes(u) for u in (*n.users, *(u for u in b.users if u is not n))):
        return None
    return float(c)


def _save_masks_as_bools(graph: fx.Graph, saved: List[fx.Node], forward: Set[fx.Node],
                         backward: Set[fx.Node], fw_outs: List[fx.Node]) -> List[fx.Node]:
    """Saved dropout masks become bool tensors. The mask the backward reads
    is 0 or 1 / c (a float tensor, 4 or 8 bytes an element; eager's
    native_dropout keeps a bool); the forward saves ``mask != 0`` instead
    and the backward computes ``bool.to(dtype) / c`` again, the same bits:
    0 / c and 1 / c. A transformer layer saves four masks, 7 MiB of 27 at
    bench-train's size. Returns the saved nodes with each such mask
    replaced."""
    aten = torch.ops.aten
    out = []
    order = {n: k for k, n in enumerate(graph.nodes)}
    for a in saved:
        c = _mask_scale(a) if a not in fw_outs else None
        users = sorted((u for u in a.users if u in backward), key=order.__getitem__)
        if c is None or not users:
            out.append(a)
            continue
        with graph.inserting_after(a):
            m = graph.call_function(aten.ne.Scalar, (a, 0))
        with graph.inserting_before(users[0]):
            f = graph.call_function(aten._to_copy.default, (m,),
                                    {"dtype": a.meta["tensor_meta"].dtype})
            again = graph.call_function(aten.div.Scalar, (f, c))
        for u in users:
            u.replace_input_with(a, again)
        forward.add(m)
        backward.update((f, again))
        out.append(m)
    return out


# -- gradients autograd alone holds --------------------------------------
#
# Autograd keeps the incoming gradients of a node alive until the node's
# backward returns. Eager's first backward node is short, so the gradient
# of the model's output is freed early; a compiled backward is one node,
# so the gradient would stay for all of it. When nothing but autograd
# refers to a gradient, its memory can serve the backward program instead
# (compiled.arena.Donation). "Nothing else" is read from the reference
# counts of the gradient's TensorImpl and StorageImpl (a
# c10::intrusive_ptr_target: a vtable pointer, then the strong count), as
# autograd itself decides when it may steal a gradient, plus the Python
# object's own count (a hook that kept the gradient). The expected counts
# are not assumed: they are measured once per process on a gradient known
# to be autograd's alone and checked to differ from those of a gradient
# the caller also holds; if anything there is unexpected, nothing is
# donated.


def _strong_count(address: int) -> int:
    import ctypes
    return ctypes.c_size_t.from_address(address + 8).value


def _storage_of(t: torch.Tensor):
    if hasattr(t, "untyped_storage"):
        return t.untyped_storage()
    return t.storage()._storage


def _references(grads) -> List[Optional[tuple]]:
    """Per gradient: its reference counts, or None when it could not be
    donated anyway (not a plain contiguous tensor owning its storage)."""
    out: List[Optional[tuple]] = []
    for g in grads:
        if type(g) is not _Tensor or g.layout != torch.strided or g.requires_grad \
                or g._base is not None or g.storage_offset() != 0 or not g.is_contiguous():
            out.append(None)
            continue
        st = _storage_of(g)
        if st.nbytes() != g.numel() * g.element_size():
            out.append(None)
            continue
        out.append((sys.getrefcount(g), _strong_count(g._cdata), _strong_count(st._cdata)))
    return out


class _Probe(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, seen):
        ctx.seen = seen
        return x.clone()

    @staticmethod
    def backward(ctx, *grads):
        ctx.seen.append(_references(grads)[0])
        return grads[0], None


_SOLE_UNSET = object()
_sole: Any = _SOLE_UNSET


def _sole_counts() -> Optional[tuple]:
    """The reference counts of a gradient only autograd holds, as
    _references reports them in a backward; None: do not donate."""
    global _sole
    if _sole is not _SOLE_UNSET:
        return _sole
    _sole = None
    if os.environ.get("COMPILED_DONATE_GRADS", "1") in ("0", "false", "no"):
        return None
    try:
        with torch.enable_grad():
            t = torch.empty(8)
            before = _strong_count(t._cdata)
            holder = torch.zeros(8, requires_grad=True)
            holder.grad = t  # a C++ reference to t's TensorImpl
            held = _strong_count(t._cdata)
            holder.grad = None
            st = _storage_of(t)
            alone = _strong_count(st._cdata)
            view = t[1:]  # a second TensorImpl on the storage
            shared = _strong_count(st._cdata)
            del view, st
            if (held, _strong_count(t._cdata), shared) != (before + 1, before, alone + 1):
                return None
            x = torch.ones(8, requires_grad=True)
            seen: List[Optional[tuple]] = []
            (_Probe.apply(x, seen) * 2).sum().backward()  # autograd's alone
            mine = torch.ones(8)
            _Probe.apply(x, seen).backward(mine)  # the caller holds it too
            keep = []
            y = _Probe.apply(x, seen)
            y.register_hook(keep.append)  # a hook keeps it
            (y * 2).sum().backward()
        if len(seen) == 3 and seen[0] is not None and seen[0] not in (seen[1], seen[2]):
            _sole = seen[0]
    except Exception:  # an unexpected torch: no donation
        _sole = None
    return _sole


class _Function(torch.autograd.Function):
    """Runs a :class:`TrainingStep`'s forward program and, on
    ``backward()``, its backward program."""

    @staticmethod
    def forward(ctx, step: "TrainingStep", *args):
        outs = step.fw(*args)
        n = step.num_outs
        saved = outs[n:]
        ctx.step = step
        ctx.save_for_backward(*saved, *[args[i] for i in step.saved_primals])
        user = outs[:n]
        frozen = [u for u, need in zip(user, step.needs_grad) if not need]
        if frozen:
            ctx.mark_non_differentiable(*frozen)
        return tuple(user)

    @staticmethod
    def backward(ctx, *grads):
        if torch.is_grad_enabled():
            raise RuntimeError(
                "compiled: a compiled backward cannot be differentiated again "
                "(backward with create_graph=True): call the original function where "
                "higher-order gradients are needed")
        step = ctx.step
        sole = step.sole
        refs = _references(grads) if sole is not None else ()
        args = list(ctx.saved_tensors)
        donated = []
        for k, (g, need) in enumerate(zip(grads, step.needs_grad)):
            if need:
                if refs and refs[k] == sole:
                    donated.append(len(args))
                args.append(g.contiguous())
        # Hand the saved values over to the backward program (boxed: it
        # empties the list and drops each value after its last use, as
        # eager's autograd frees saved tensors node by node); with
        # retain_graph=True autograd keeps them.
        ctx.maybe_clear_saved_tensors()
        results = step.bw(args, Donation(donated)) if donated else step.bw(args)
        out: List[Optional[torch.Tensor]] = [None] * (1 + step.num_args)
        for i, g in zip(step.grad_inputs, results):
            out[1 + i] = g
        return tuple(out)


class TrainingStep:
    """The entry :class:`compiled.CompiledFunction` keeps for a training
    signature: called with (module state, flattened user inputs), returns
    the outputs in the function's structure; ``loss.backward()`` runs the
    backward program."""

    def __init__(self, split_: Split, fw_program, bw_program, num_args: int):
        self.fw = fw_program.fn
        self.bw = bw_program.fn
        self.fw_program = fw_program
        self.bw_program = bw_program
        self.num_outs = split_.num_outs
        self.needs_grad = split_.needs_grad
        self.saved_primals = split_.saved_primals
        self.grad_inputs = split_.grad_inputs
        self.out_spec = split_.out_spec
        self.num_args = num_args
        # the backward program may reuse gradients only autograd holds
        # (native boxed programs take a Donation)
        self.sole = _sole_counts() if getattr(bw_program, "native", False) else None
        self._apply = _Function.apply
        self._unflatten = pytree.tree_unflatten

    def __call__(self, *args):
        return self._unflatten(list(self._apply(self, *args)), self.out_spec)

    def summary(self) -> Dict[str, Any]:
        s = dict(self.fw_program.summary)
        s["backward"] = dict(self.bw_program.summary)
        return s
