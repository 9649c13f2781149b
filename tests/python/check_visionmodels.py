#!/usr/bin/env python3
"""tests/python/visionmodels.py against the real torchvision.

Not part of `make test` (the project's torch has no torchvision); run it
where torchvision is installed, e.g. in a separate venv with torch 2.14.1
and torchvision 0.29.1:

    /work/tvenv/bin/python tests/python/check_visionmodels.py [--only resnet18,...]

(/usr/bin/python3, Debian's torch 1.13 and torchvision 0.14, runs it too;
visionmodels follows 0.29 where 0.14 differs: 0.14's memory-efficient
DenseNet checkpoints with the reentrant variant, other ATen calls.)
For each model, built by torchvision and by visionmodels with the same
arguments, it checks:

  modules   the same module paths, in the same order;
  init      after the same torch.manual_seed, the same state_dict (keys,
            shapes, values: the generator is drawn in the same order);
  ops       the same ATen calls, in the same order, in an eval forward
            and in a train-mode forward and backward;
  eval      torchvision's state_dict (running statistics randomized) loads
            into ours with strict=True, and the eval outputs agree;
  train     a train-mode forward and backward from the same seed (dropout
            and stochastic depth draw the same masks): outputs, gradients
            and updated running statistics agree.

Prints one line per model with the largest absolute differences; exits 1
if any check fails.
"""

import argparse
import copy
import os
import sys
import time

import torch
import torchvision
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import visionmodels  # noqa: E402

TV = torchvision.models


def small_vit(m, **kw):
    return m.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                               hidden_dim=32, mlp_dim=64, **kw)


def small_densenet(m, **kw):
    return m.DenseNet(growth_rate=8, block_config=(2, 2), num_init_features=16, **kw)


def image(n, size):
    return lambda: torch.randn(n, 3, size, size)


# name -> (build(models namespace), input maker)
MODELS = {
    "resnet18": (lambda m: m.resnet18(), image(2, 64)),
    "resnet18_10_classes": (lambda m: m.resnet18(num_classes=10), image(2, 64)),
    "resnet34": (lambda m: m.resnet34(), image(2, 64)),
    "resnet50": (lambda m: m.resnet50(), image(2, 64)),
    "resnet50_zero_init_residual": (lambda m: m.resnet50(zero_init_residual=True), image(2, 64)),
    "resnet50_dilated": (lambda m: m.resnet50(replace_stride_with_dilation=[False, True, True]),
                         image(2, 64)),
    "mobilenet_v2": (lambda m: m.mobilenet_v2(), image(2, 64)),
    "mobilenet_v2_width_0.5": (lambda m: m.mobilenet_v2(width_mult=0.5), image(2, 64)),
    "mobilenet_v3_large": (lambda m: m.mobilenet_v3_large(), image(2, 64)),
    "mobilenet_v3_small": (lambda m: m.mobilenet_v3_small(), image(2, 64)),
    "mobilenet_v3_small_reduced_tail": (
        lambda m: m.mobilenet_v3_small(reduced_tail=True, width_mult=0.75), image(2, 64)),
    "efficientnet_b0": (lambda m: m.efficientnet_b0(), image(2, 64)),
    "densenet121": (lambda m: m.densenet121(), image(2, 64)),
    "densenet_small": (small_densenet, image(2, 32)),
    "densenet_small_dropout": (lambda m: small_densenet(m, drop_rate=0.3), image(2, 32)),
    "densenet_small_memory_efficient": (lambda m: small_densenet(m, memory_efficient=True),
                                        image(2, 32)),
    "vit_small": (small_vit, image(2, 32)),
    "vit_small_dropout_representation": (
        lambda m: small_vit(m, dropout=0.1, attention_dropout=0.1, representation_size=16,
                            num_classes=7), image(2, 32)),
    "vit_b_16": (lambda m: m.vit_b_16(), image(2, 224)),
    "lraspp_mobilenet_v3_large": (
        lambda m: m.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None),
        image(2, 64)),
    "lraspp_mobilenet_v3_large_5_classes": (
        lambda m: m.segmentation.lraspp_mobilenet_v3_large(
            weights=None, weights_backbone=None, num_classes=5), image(2, 64)),
}


class OpLog(TorchDispatchMode):
    """The names of the ATen calls a forward makes."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def output(y):
    return y["out"] if isinstance(y, dict) else y


def max_diff(a, b):
    """The largest absolute difference of two same-keyed tensor dicts."""
    if a.keys() != b.keys():
        raise AssertionError(f"different keys: {sorted(a.keys() ^ b.keys())[:5]}")
    worst = 0.0
    for k in a:
        if a[k].shape != b[k].shape:
            raise AssertionError(f"{k}: shape {tuple(a[k].shape)} != {tuple(b[k].shape)}")
        if a[k].numel():
            worst = max(worst, (a[k].double() - b[k].double()).abs().max().item())
    return worst


def randomize_running_stats(model, gen):
    """Running statistics away from their 0/1 start, so eval mode's batch
    norms compute something."""
    for name, buf in model.named_buffers():
        if name.endswith("running_mean"):
            buf.copy_(torch.randn(buf.shape, generator=gen) * 0.1)
        elif name.endswith("running_var"):
            buf.copy_(torch.rand(buf.shape, generator=gen) + 0.5)


def train_step(model, x, seed):
    """Output, gradients, buffers and ATen calls of a train-mode step."""
    torch.manual_seed(seed)
    with OpLog() as log:
        y = output(model.train()(x))
        y.pow(2).mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return y.detach(), grads, {n: b for n, b in model.named_buffers()}, log.ops


def first_difference(a, b, what):
    if a != b:
        i = next(i for i, (p, q) in enumerate(zip(a + [""], b + [""])) if p != q)
        raise AssertionError(f"ATen calls of {what} differ at call {i}: {a[i:i + 3]} "
                             f"(torchvision) vs {b[i:i + 3]} (ours)")


def check(name):
    build, make_input = MODELS[name]
    torch.manual_seed(0)
    theirs = build(TV)
    torch.manual_seed(0)
    ours = build(visionmodels)
    result = {}

    a = [n for n, _ in theirs.named_modules()]
    b = [n for n, _ in ours.named_modules()]
    if a != b:
        only = [n for n in a if n not in b][:3], [n for n in b if n not in a][:3]
        if only == ([], []):
            i = next(i for i, (p, q) in enumerate(zip(a, b)) if p != q)
            raise AssertionError(f"module {i} is {a[i]!r} in torchvision, {b[i]!r} in ours")
        raise AssertionError(f"module paths differ (torchvision only, ours only): {only}")
    result["init"] = max_diff(theirs.state_dict(), ours.state_dict())
    if result["init"]:
        raise AssertionError(f"init differs by {result['init']}")

    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        randomize_running_stats(theirs, gen)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    torch.manual_seed(2)
    x = make_input()
    theirs.eval()
    ours.eval()
    with torch.no_grad():
        with OpLog() as log_a:
            ya = output(theirs(x))
        with OpLog() as log_b:
            yb = output(ours(x))
    first_difference(log_a.ops, log_b.ops, "the eval forward")
    result["ops"] = len(log_a.ops)
    result["eval"] = max_diff({"y": ya}, {"y": yb})

    ta, tb = copy.deepcopy(theirs), copy.deepcopy(ours)
    ya, ga, ba, ops_a = train_step(ta, x.clone(), 3)
    yb, gb, bb, ops_b = train_step(tb, x.clone(), 3)
    first_difference(ops_a, ops_b, "the train step")
    result["train_ops"] = len(ops_a)
    result["train"] = max_diff({"y": ya}, {"y": yb})
    result["grad"] = max_diff(ga, gb)
    result["buffers"] = max_diff(ba, bb)
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="", help="comma-separated names (default: all)")
    args = p.parse_args(argv)
    names = [n for n in args.only.split(",") if n] or list(MODELS)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}", flush=True)
    failed = 0
    for name in names:
        t = time.monotonic()
        try:
            r = check(name)
        except Exception as e:  # a mismatch, or torchvision lacks the model
            failed += 1
            print(f"{name}: FAIL {type(e).__name__}: {e}", flush=True)
            continue
        bad = any(r[k] for k in ("eval", "train", "grad", "buffers"))
        failed += bad
        print(f"{name}: {'DIFFERENT' if bad else 'SAME'}: init identical, ATen calls alike "
              f"({r['ops']} eval, {r['train_ops']} train step); max |diff| eval {r['eval']:.3g}, "
              f"train {r['train']:.3g}, grad {r['grad']:.3g}, buffers {r['buffers']:.3g} "
              f"({time.monotonic() - t:.1f} s)", flush=True)
    print(f"{len(names) - failed} of {len(names)} models match", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
