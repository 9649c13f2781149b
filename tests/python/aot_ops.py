"""The ATen operators torch 2's AOTAutograd hands the compiled backend, and
how the daemon handles each: a corpus of small models run through
``torch.compile(backend="compiled")`` (compiled.dynamo: no decompositions,
the min-cut partitioner, inference input mutations kept), in inference and
in training.

Usage (from the repository root, after ``make``):

  COMPILED_SRC=$PWD COMPILED_BUILD=$PWD/build \\
  PYTHONPATH=$PWD/client/python:$PWD/tests/python \\
  .venv/bin/python tests/python/aot_ops.py [--server HOST:PORT] [CASE...]

Without --server it starts a daemon of $COMPILED_BUILD (tests/python/
daemon_util.py) in a temporary folder. It prints one line per operator:
how many graph nodes call it, in which cases, and how the daemon ran them:
``native`` (generated code), ``extern`` (a library call the compiler
chose: matrix products, convolutions, attention), ``fallback`` (an ATen
call because nothing lowers it, or its rule declined this call: the
``fallback_ops`` of the program's summary) or ``removed`` (no node of the
daemon's program: functionalization folded it into its neighbours or into
the program's write-backs, as copy_ into an input). Native and extern
come from the operator's row in compiler/opfacts.def.

tests/python/test_dynamo_ops.py runs the same cases, compares every
result and gradient with eager PyTorch and checks that nothing is a
fallback but the operators it lists, each with its reason.
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import os
import re
import sys
import tempfile
import warnings
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

SRC = os.environ.get("COMPILED_SRC", os.path.join(os.path.dirname(__file__), "..", ".."))


# ---- the models ----

class ConvBnNet(nn.Module):
    """conv + batch norm + relu + max pool + linear + softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        y = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(y, 1)).softmax(-1)


class MLP(nn.Module):
    """Linear layers with gelu, silu, tanh, sigmoid, hardtanh and dropout."""

    def __init__(self, p=0.25):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 8)
        self.drop = nn.Dropout(p)

    def forward(self, x):
        y = self.drop(F.gelu(self.l1(x)))
        y = self.drop(F.silu(self.l2(y))) + torch.tanh(y) * torch.sigmoid(y)
        return F.hardtanh(self.l3(y), -0.5, 0.5)


class Attention(nn.Module):
    """Layer norm and single-head softmax attention written out, then the
    same through F.scaled_dot_product_attention."""

    def __init__(self, d=16):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
        w = torch.softmax(q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5, dim=-1)
        y = self.out(w @ v)
        z = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1))
        return y + z.squeeze(1) + F.log_softmax(y, dim=-1)


class EmbedCE(nn.Module):
    """Embedding, linear, cross entropy against targets."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.fc = nn.Linear(16, 10)

    def forward(self, tokens, target):
        logits = self.fc(self.emb(tokens)).flatten(0, 1)
        return F.cross_entropy(logits, target.flatten())


class ResBlock(nn.Module):
    """A basic residual block (resnet18's)."""

    def __init__(self, c=8):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        return F.relu(self.b2(self.c2(y)) + x)


class MobileBlock(nn.Module):
    """Pointwise and depthwise convolutions with hardswish and relu6."""

    def __init__(self, c=8, e=16):
        super().__init__()
        self.expand, self.b1 = nn.Conv2d(c, e, 1, bias=False), nn.BatchNorm2d(e)
        self.dw, self.b2 = nn.Conv2d(e, e, 3, padding=1, groups=e, bias=False), nn.BatchNorm2d(e)
        self.project = nn.Conv2d(e, c, 1)
        self.fc = nn.Linear(c, 4)

    def forward(self, x):
        y = F.hardswish(self.b1(self.expand(x)))
        y = F.relu6(self.b2(self.dw(y)))
        y = self.project(y) + x
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class Pools(nn.Module):
    """Max, average and adaptive pooling."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        a = F.max_pool2d(y, 2)
        b = F.avg_pool2d(y, 2)
        c = F.adaptive_avg_pool2d(y, (4, 4))
        d = F.adaptive_max_pool2d(y, (4, 4))
        return a + b + c + d


class Upsample(nn.Module):
    """Nearest and bilinear upsampling around a convolution."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = self.conv(x)
        a = F.interpolate(y, scale_factor=2, mode="nearest")
        b = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return a * b


class Norms(nn.Module):
    """Batch norm without running statistics, instance norm, group norm."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8, track_running_stats=False)
        self.inorm = nn.InstanceNorm2d(8, affine=True)
        self.gn = nn.GroupNorm(2, 8)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + self.inorm(y) * self.gn(y)


def _encoder():
    return nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.1,
                                      batch_first=True)


def _tokens():
    return (torch.randint(0, 50, (2, 6)), torch.randint(0, 10, (2, 6)))


# ---- the cases ----

@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    model: Callable[[], nn.Module]
    inputs: Callable[[], Tuple[torch.Tensor, ...]]
    train: bool
    random: bool = False   # training draws random numbers (dropout)

    @property
    def id(self) -> str:
        return f"{self.name}-{'train' if self.train else 'eval'}"


def _both(name, model, inputs, random=False) -> List[Case]:
    return [Case(name, model, inputs, False), Case(name, model, inputs, True, random)]


CASES: List[Case] = [
    *_both("conv_bn", ConvBnNet, lambda: (torch.randn(4, 3, 8, 8),)),
    *_both("mlp_dropout", MLP, lambda: (torch.randn(8, 16),), random=True),
    *_both("attention", Attention, lambda: (torch.randn(2, 6, 16),)),
    *_both("transformer", _encoder, lambda: (torch.randn(2, 6, 16),), random=True),
    *_both("embed_ce", EmbedCE, _tokens),
    *_both("resblock", ResBlock, lambda: (torch.randn(2, 8, 8, 8),)),
    *_both("mobile", MobileBlock, lambda: (torch.randn(2, 8, 8, 8),)),
    *_both("pools", Pools, lambda: (torch.randn(2, 3, 8, 8),)),
    *_both("upsample", Upsample, lambda: (torch.randn(2, 3, 5, 5),)),
    *_both("norms", Norms, lambda: (torch.randn(2, 3, 6, 6),)),
]


# ---- running a case ----

@dataclasses.dataclass
class Graph:
    """One ATen graph the backend compiled."""
    role: str                  # forward, backward, inference
    ops: List[str]             # qualified operator of every call node
    summary: Optional[dict]    # the program's summary (None: not compiled)


@dataclasses.dataclass
class Result:
    case: Case
    graphs: List[Graph]
    outputs: Tuple[torch.Tensor, torch.Tensor]          # (compiled, eager)
    grads: List[Tuple[str, torch.Tensor, torch.Tensor]]  # (what, compiled, eager)
    buffers: List[Tuple[str, torch.Tensor, torch.Tensor]]
    warnings: List[str]


def qualified(op) -> str:
    """The name the daemon knows an OpOverload by ("aten::add.Tensor")."""
    s = op._schema
    return s.name + ("." + s.overload_name if s.overload_name else "")


def graph_ops(gm: torch.fx.GraphModule) -> List[str]:
    return [qualified(n.target) for n in gm.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)]


def run_case(case: Case, server: str, seed: int = 0, **options) -> Result:
    """Runs `case` compiled and eagerly from the same seed: one inference
    call, or one training step whose loss weighs the output by a random
    tensor (so every backward operator sees a non-trivial gradient)."""
    from compiled import dynamo
    torch._dynamo.reset()
    torch.manual_seed(seed)
    model = case.model()
    model.train(case.train)
    ref = copy.deepcopy(model)
    inputs = case.inputs()
    ref_inputs = tuple(t.clone() for t in inputs)
    if case.train:
        for t in inputs + ref_inputs:
            if t.is_floating_point():
                t.requires_grad_(True)
    loaded = dynamo.loaded_graphs()
    mark = loaded[-1].serial + 1 if loaded else 0
    fast = torch.compile(model, backend="compiled",
                         options={"server": server, **options})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.set_grad_enabled(case.train):
            state = torch.get_rng_state()
            out = fast(*inputs)
            torch.set_rng_state(state)
            ref_out = ref(*ref_inputs)
            grads: List[Tuple[str, torch.Tensor, torch.Tensor]] = []
            if case.train:
                weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1))
                (out * weight).sum().backward()
                (ref_out * weight).sum().backward()
                for (name, p), q in zip(model.named_parameters(), ref.parameters()):
                    grads.append((f"grad of {name}", p.grad, q.grad))
                for i, (a, b) in enumerate(zip(inputs, ref_inputs)):
                    if a.requires_grad:
                        grads.append((f"grad of input {i}", a.grad, b.grad))
    buffers = [(name, b, rb) for (name, b), rb in zip(model.named_buffers(), ref.buffers())]
    graphs = [Graph(g.role, graph_ops(g.gm), g.program.summary if g.program else None)
              for g in dynamo.loaded_graphs() if g.serial >= mark]
    torch._dynamo.reset()
    return Result(case, graphs, (out.detach(), ref_out.detach()), grads, buffers,
                  [f"{w.category.__name__}: {w.message}" for w in caught
                   if "compiled" in str(w.message)])


# ---- how the daemon handles an operator ----

_ROW = re.compile(r'\b(RULE|OP)\("([^"]+)",\s*(\w+)')


def lowering_classes(path: Optional[str] = None) -> Dict[str, str]:
    """Operator -> its lowering class (POINTWISE, EXTERN, ...) from the rows
    of compiler/opfacts.def that have a lowering."""
    path = path or os.path.join(SRC, "compiler", "opfacts.def")
    with open(path) as f:
        return {m.group(2): m.group(3) for m in _ROW.finditer(f.read())}


def handling(results: Sequence[Result], classes: Dict[str, str]):
    """Operator -> (nodes, {native|extern|fallback|removed|not compiled: count},
    case ids), over every graph of `results`."""
    table: Dict[str, list] = {}
    for r in results:
        for g in r.graphs:
            fallbacks = collections.Counter(g.summary["fallback_ops"]) if g.summary else None
            for op in g.ops:
                row = table.setdefault(op, [0, collections.Counter(), set()])
                row[0] += 1
                row[2].add(r.case.id)
                if fallbacks is None:
                    how = "not compiled"
                elif fallbacks[op] > 0:
                    fallbacks[op] -= 1
                    how = "fallback"
                elif op in classes:
                    how = "extern" if classes[op] == "EXTERN" else "native"
                else:
                    how = "removed"
                row[1][how] += 1
    return table


def fallbacks(result: Result) -> List[str]:
    """The operators of every fallback node of the case's programs."""
    out = []
    for g in result.graphs:
        if g.summary:
            out += g.summary["fallback_ops"]
    return out


def print_table(results: Sequence[Result], out=sys.stdout) -> None:
    table = handling(results, lowering_classes())
    width = max([len(op) for op in table] + [8])
    print(f"{'operator':{width}}  nodes  handled as                    cases", file=out)
    for op in sorted(table):
        nodes, how, cases = table[op]
        hs = ", ".join(f"{k} {v}" if len(how) > 1 else k for k, v in sorted(how.items()))
        print(f"{op:{width}}  {nodes:5}  {hs:28}  {' '.join(sorted(cases))}", file=out)
    for r in results:
        for w in r.warnings:
            print(f"{r.case.id}: {w}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="a running daemon (default: start one)")
    ap.add_argument("--eager-random", action="store_true",
                    help="the backend's eager_random option (random ops stay ATen calls)")
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    args = ap.parse_args(argv)
    cases = [c for c in CASES if not args.cases or c.name in args.cases or c.id in args.cases]
    daemon = None
    server = args.server
    if server is None:
        import daemon_util
        daemon = daemon_util.Daemon(tempfile.mkdtemp(prefix="aot_ops.")).start()
        server = daemon.address
    try:
        options = {"eager_random": True} if args.eager_random else {}
        results = [run_case(c, server, **options) for c in cases]
    finally:
        if daemon is not None:
            daemon.stop()
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
