#!/usr/bin/env python3
"""Every torchvision classification and segmentation model trained one step
through `compiled`: `make train-zoo`.

Not part of `make test` (about 80 models, forward and backward compiled for
each: several minutes). For each model (train mode, batch 2 at 64x64;
224x224 for the vision transformers and maxvit, 75x75 for inception_v3, the minimum
their layers take) the compiled step and an eager twin from the same state
run forward and backward with the same incoming gradient, and so does a
float64 eager copy, the reference (dropout and stochastic depth in eval
mode: random masks are not compared; segmentation models, named
segmentation.NAME, with 5 classes and no auxiliary head, their "out"
judged). Prints one line per model: OK with
the compiled and the eager float32 gradient errors (the largest
difference from the reference, relative to the reference's largest
gradient) and the ATen calls left besides convolution_backward (a library
call on both sides). When the compiled error is more than ten times
eager's (and above 1e-5), eager runs again with its input moved by a few
ulps: UNSTABLE when its gradients move as far (a max pool choosing between
values a rounding apart decides a gradient: vgg19_bn at 64x64), else
MISMATCH. ERROR when a step fails; exits 1 on any MISMATCH or ERROR.
Models of more than 150M parameters are skipped (three copies, one in
float64, do not fit). It starts a daemon of its own, with an empty cache.

    /usr/bin/python3 tests/python/train_zoo.py [--only resnet18,...]
"""

import argparse
import collections
import copy
import os
import sys
import tempfile
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compiled  # noqa: E402
import daemon_util  # noqa: E402
from metatrace_zoo import classification_models, torchvision  # noqa: E402 (exits without it)

LIBRARY = {"aten::convolution_backward"}


SEGMENTATION = ["fcn_resnet50", "fcn_resnet101", "deeplabv3_resnet50", "deeplabv3_resnet101",
                "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"]


def build(name):
    """The model `name` (segmentation.NAME: a segmentation model)."""
    if name.startswith("segmentation."):
        return getattr(torchvision.models.segmentation, name.split(".", 1)[1])(
            weights=None, weights_backbone=None, num_classes=5, aux_loss=False)
    kwargs = {"aux_logits": False, "init_weights": False} if name in (
        "googlenet", "inception_v3") else {}
    return getattr(torchvision.models, name)(**kwargs)


def out(y):
    """A model's output tensor (a segmentation model's "out")."""
    return y["out"] if isinstance(y, dict) else y


def input_size(name):
    if name.startswith(("vit_", "swin_", "maxvit")):
        return 224
    return 75 if name == "inception_v3" else 64


def random_layers_off(model):
    """Dropout and stochastic depth in eval mode: their masks are random
    draws, which a float64 reference would not draw alike."""
    import torchvision.ops
    for m in model.modules():
        if isinstance(m, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            m.eval()
    return model


def grad_errors(model, twin, ref):
    """The largest gradient difference of the compiled model and of the
    float32 eager twin from a float64 eager reference, relative to the
    reference's largest gradient over all parameters (a parameter whose
    gradient is rounding noise, a bias before batch norm, is not judged on
    its own scale)."""
    scale = max((r.grad.abs().max().item() for r in ref.parameters()
                 if r.grad is not None and r.grad.numel()), default=1.0) or 1.0
    worst_c = worst_e = 0.0
    for p, q, r in zip(model.parameters(), twin.parameters(), ref.parameters()):
        if (p.grad is None) != (r.grad is None):
            return float("inf"), 0.0
        if r.grad is None or not r.grad.numel():
            continue
        worst_c = max(worst_c, (p.grad.double() - r.grad).abs().max().item() / scale)
        worst_e = max(worst_e, (q.grad.double() - r.grad).abs().max().item() / scale)
    return worst_c, worst_e


MAX_PARAMS = 150_000_000  # three copies and their gradients, one in float64


def eager_spread(model, x, grad, ref, runs=3):
    """How far eager's own gradients move when the input moves by a few
    ulps: where a max pool picks between values a rounding apart, or a
    relu's input is a rounding away from 0, one last bit decides a
    gradient, and a compiled program is not expected to decide alike."""
    scale = max(r.grad.abs().max().item() for r in ref.parameters() if r.grad is not None)
    base = None
    worst = 0.0
    for k in range(runs + 1):
        t = copy.deepcopy(model)
        for p in t.parameters():
            p.grad = None
        noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(k))
        out(t(x if k == 0 else x * (1 + 2e-7 * noise))).backward(grad)
        grads = [p.grad for p in t.parameters()]
        if base is None:
            base = grads
            continue
        for a, b in zip(grads, base):
            if a is not None and b is not None and a.numel():
                worst = max(worst, (a - b).abs().max().item() / scale)
    return worst


def one(name, server):
    torch.manual_seed(0)
    model = random_layers_off(build(name).train())
    n = sum(p.numel() for p in model.parameters())
    if n > MAX_PARAMS:
        raise TypeError(f"{n / 1e6:.0f}M parameters: too big for three copies here")
    twin = copy.deepcopy(model)
    ref = copy.deepcopy(model).double()
    size = input_size(name)
    x = torch.randn(2, 3, size, size)
    cf = compiled.compile(model, (x,), server=server)
    y = out(cf(x))
    grad = torch.randn(y.shape)
    y.backward(grad)
    out(twin(x)).backward(grad)
    out(ref(x.double())).backward(grad.double())
    s = cf.summary()
    left = collections.Counter(op for op in s.get("fallback_ops", []) +
                               s.get("backward", {}).get("fallback_ops", [])
                               if op not in LIBRARY)
    errs = grad_errors(model, twin, ref)
    spread = None
    if errs[0] > max(10 * errs[1], 1e-5):
        spread = eager_spread(twin, x, grad, ref)
    return errs, spread, dict(left), s


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="")
    args = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch.set_num_threads(2)
    names = [n for n in args.only.split(",") if n] or (
        classification_models() + ["segmentation." + n for n in SEGMENTATION])
    counts = collections.Counter()
    with tempfile.TemporaryDirectory(prefix="train-zoo-") as d:
        daemon = daemon_util.Daemon(d).start()
        try:
            for name in names:
                t0 = time.perf_counter()
                try:
                    (err, eager_err), spread, left, s = one(name, daemon.address)
                except (AttributeError, TypeError) as e:
                    counts["skipped"] += 1  # not a model builder
                    print(f"{name}: SKIPPED ({e})", flush=True)
                    continue
                except Exception as e:  # noqa: BLE001 (reported, counted)
                    counts["error"] += 1
                    print(f"{name}: ERROR {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                verdict = ("OK" if spread is None
                           else "UNSTABLE" if err <= 2 * spread else "MISMATCH")
                counts[verdict.lower()] += 1
                counts["no ATen call left"] += not left
                runs = f"{s.get('runs')}/{s.get('backward', {}).get('runs')}"
                moved = f", eager's with the input a few ulps away {spread:.1e}" if spread else ""
                print(f"{name}: {verdict} (grad error {err:.1e}, eager's {eager_err:.1e}{moved}, "
                      f"runs {runs}, ATen calls "
                      f"besides convolution_backward: {left or 'none'}; "
                      f"{time.perf_counter() - t0:.0f} s)", flush=True)
        finally:
            daemon.stop()
    print(", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 1 if counts["mismatch"] or counts["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
