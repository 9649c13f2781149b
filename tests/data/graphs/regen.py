"""Regenerate the captured test graphs in tests/data/graphs.

Run from the repository root:

    .venv/bin/python tests/data/graphs/regen.py [--out DIR]

Every case below builds a program and its example inputs from a fixed seed,
captures it with ``compiled.export_graph`` and writes ``<name>.pb`` (and
``<name>.json`` for the few cases listed in JSON_CASES). The output is
byte-for-byte deterministic; tests/python/test_capture.py checks that the
committed files are up to date. README.md next to this file describes what
each graph exercises; keep it in sync when adding a case.

The cases are also imported by the tests (``CASES``), which run each program
eagerly and compare against the captured metadata.
"""

import argparse
import math
import os
import sys

import compiled
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# Modules and functions.
# ---------------------------------------------------------------------------


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class ConvBnReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


class TrainingBlock(nn.Module):
    """Training mode: batch norm updates its running stats (buffer mutation),
    dropout draws random numbers, parameters require grad."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.bn = nn.BatchNorm1d(6)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        return self.drop(F.gelu(self.bn(self.fc(x))))


class TiedEmbedding(nn.Module):
    """Embedding and output projection share one weight; a non-persistent
    buffer scales the logits."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 10, bias=False)
        self.proj.weight = self.embed.weight
        self.register_buffer("scale", torch.tensor(0.5), persistent=False)

    def forward(self, tokens):
        return self.proj(self.embed(tokens)) * self.scale


def attention(q, k, v):
    """Scaled dot-product attention written by hand."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v


def add_inplace(x):
    x.add_(1)
    return x * 2


def slice_mul_inplace(x):
    x[0].mul_(2)
    return x.sum()


def transpose_inplace(x):
    x.t_()
    return x


def add_out(a, b, c):
    torch.add(a, b, out=c)
    return c.relu()


def copy_inplace(x, y):
    x[1:].copy_(y)
    return x.abs()


def return_views(x):
    return x.view(-1), x.transpose(0, 1), x[1:, ::2]


def split_unbind_chunk(x):
    a, b = torch.split(x, 2)
    c = torch.unbind(x, 1)
    d = torch.chunk(x, 2, dim=1)
    return a, b, c[0], c[2], d[1]


def return_mutated_input(x, y):
    x.mul_(y)
    return x


def shared_storage(a, b):
    a.add_(1)
    return a + b


def mixed_dtypes(h, bf, i8, u8, mask):
    s = h.float() + bf.float()
    q = (i8.to(torch.int32) + u8) * 2
    return torch.where(mask, s, q.to(s.dtype)), (h * 2).to(torch.bfloat16), q > 3


def complex64(z, w):
    p = z * w.conj()
    return torch.view_as_real(p), p.abs(), torch.angle(z)


def reduction_keepdim(x):
    return x.sum(dim=1, keepdim=True), x.amax(dim=(0, 2), keepdim=True), x.mean(-1)


def index_put(x, idx, v):
    x[idx] = v
    x.index_put_((idx,), v, accumulate=True)
    return x.index_put((idx, torch.tensor([1, 2])), torch.tensor(0.0))


def scatter(x, index, src):
    y = torch.scatter(x, 1, index, src)
    x.scatter_add_(0, index, src)
    return y, x.scatter(1, index, 2.5, reduce="add")


def cat_stack(a, b, c):
    return torch.cat([a, b], dim=0), torch.stack([a, b, c]), torch.cat([c, a], 1)


def index_tensor(x, idx, mask):
    return x[idx], x[:, idx], x[mask]


def scalar_args(x, n, alpha, flag):
    y = x.pow(n).add(x, alpha=alpha)
    return y.clamp(min=-alpha) if flag else y, n * 2


def nested_inputs(xs, pair):
    return torch.cat(xs).sum(0) + pair[0] * pair[1]


def channels_last_conv(x, w):
    y = F.conv2d(x, w, padding=1)  # channels-last in, channels-last out
    return y, y.contiguous()


def expanded_input(x, y):
    return x * y, x.sum(0)


# ---------------------------------------------------------------------------
# Cases: name -> builder returning (program, example inputs). Builders are
# called right after torch.manual_seed(0).
# ---------------------------------------------------------------------------


def _resnet18():
    import visionmodels  # torchvision's resnet18 (tests/python, put on sys.path below CASES)
    return visionmodels.resnet18(weights=None).eval(), (torch.randn(1, 3, 32, 32),)


def _shared_storage():
    base = torch.randn(4, 4)
    return shared_storage, (base[0], base[:, 1])


def _transformer(grad):
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    if not grad:
        layer.requires_grad_(False)
    return layer, (torch.randn(2, 5, 16),)


def _fused_transformer():
    """The layer's fused inference kernel, called directly: under make_fx
    (torch 2) the module itself takes its general path."""
    layer, inputs = _transformer(False)
    a = layer.self_attn

    def fused(src):
        return torch.ops.aten._transformer_encoder_layer_fwd(
            src, 16, 2, a.in_proj_weight, a.in_proj_bias, a.out_proj.weight, a.out_proj.bias,
            False, False, layer.norm1.eps, layer.norm1.weight, layer.norm1.bias,
            layer.norm2.weight, layer.norm2.bias, layer.linear1.weight, layer.linear1.bias,
            layer.linear2.weight, layer.linear2.bias)
    return fused, inputs


class MLPBlock(nn.Module):
    """A transformer's MLP half: x + fc2(gelu(fc1(layer_norm(x)))).
    (Defined here, below the others: stack traces hold line numbers, so
    moving the code above would change every committed graph.)"""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(8)
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


def scan_interp(x, g):
    """Scans and a bilinear upsampling's backward (as a training graph's
    backward calls it); below the others, as MLPBlock."""
    return (torch.cumsum(x, 1), *torch.cummax(x, 0),
            torch.ops.aten.upsample_bilinear2d_backward(g, [6, 8], [1, 2, 3, 4], False, None))


CASES = {
    "mlp": lambda: (MLP(), (torch.randn(2, 8),)),
    "layer_norm": lambda: (nn.LayerNorm(8), (torch.randn(3, 8),)),
    "mlp_block": lambda: (MLPBlock().eval(), (torch.randn(4, 8),)),
    "attention": lambda: (attention, (torch.randn(2, 4, 8), torch.randn(2, 6, 8), torch.randn(2, 6, 8))),
    "transformer_encoder_layer": lambda: _transformer(True),
    "transformer_encoder_fastpath": lambda: _fused_transformer(),
    "conv_bn_relu": lambda: (ConvBnReLU().eval(), (torch.randn(1, 3, 8, 8),)),
    "resnet18": _resnet18,
    "training_block": lambda: (TrainingBlock().train(), (torch.randn(4, 6),)),
    "tied_embedding": lambda: (TiedEmbedding(), (torch.tensor([[1, 2, 3], [4, 5, 9]]),)),
    "embedding": lambda: (nn.Embedding(12, 5, padding_idx=0), (torch.tensor([[0, 3, 11], [7, 7, 1]]),)),
    "add_inplace": lambda: (add_inplace, (torch.randn(3, 4),)),
    "slice_mul_inplace": lambda: (slice_mul_inplace, (torch.randn(3, 4),)),
    "transpose_inplace": lambda: (transpose_inplace, (torch.randn(3, 4),)),
    "add_out": lambda: (add_out, (torch.randn(3, 4), torch.randn(3, 4), torch.empty(3, 4))),
    "copy_inplace": lambda: (copy_inplace, (torch.randn(4, 3), torch.randn(3, 3))),
    "return_views": lambda: (return_views, (torch.randn(3, 4),)),
    "split_unbind_chunk": lambda: (split_unbind_chunk, (torch.randn(4, 4),)),
    "return_mutated_input": lambda: (return_mutated_input, (torch.randn(2, 3), torch.randn(3))),
    "shared_storage": _shared_storage,
    "mixed_dtypes": lambda: (mixed_dtypes, (
        torch.randn(2, 3).half(), torch.randn(2, 3).bfloat16(),
        torch.randint(-5, 5, (2, 3), dtype=torch.int8), torch.randint(0, 9, (2, 3), dtype=torch.uint8),
        torch.rand(2, 3) > 0.5)),
    "complex64": lambda: (complex64, (torch.randn(3, 2, dtype=torch.complex64),
                                      torch.randn(3, 2, dtype=torch.complex64))),
    "reduction_keepdim": lambda: (reduction_keepdim, (torch.randn(2, 3, 4),)),
    "index_put": lambda: (index_put, (torch.randn(5, 3), torch.tensor([0, 3]), torch.randn(2, 3))),
    "scatter": lambda: (scatter, (torch.randn(3, 4), torch.tensor([[0, 1], [2, 0], [1, 1]]), torch.randn(3, 2))),
    "cat_stack": lambda: (cat_stack, (torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))),
    "index_tensor": lambda: (index_tensor, (torch.randn(4, 4), torch.tensor([2, 0]),
                                            torch.tensor([True, False, True, True]))),
    "scalar_args": lambda: (scalar_args, (torch.randn(3), 3, 0.5, True)),
    "nested_inputs": lambda: (nested_inputs, ([torch.randn(2, 3), torch.randn(1, 3)],
                                              (torch.randn(3), torch.randn(3)))),
    "channels_last_conv": lambda: (channels_last_conv, (
        torch.randn(1, 2, 5, 5).contiguous(memory_format=torch.channels_last), torch.randn(3, 2, 3, 3))),
    "expanded_input": lambda: (expanded_input, (torch.randn(3, 1).expand(3, 4), torch.randn(3, 4))),
    "scan_interp": lambda: (scan_interp, (torch.randn(4, 6), torch.randn(1, 2, 6, 8))),
}

# visionmodels, for the resnet18 case (here, below every traced line: stack
# traces hold line numbers).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "python"))

# Small cases also written as proto3 JSON (readable, and exercised by the
# C tools' JSON reader).
JSON_CASES = ("add_inplace", "split_unbind_chunk", "index_tensor")


def build(name):
    """The (program, example inputs) of case ``name``, built from seed 0."""
    torch.manual_seed(0)
    return CASES[name]()


def regenerate(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name in CASES:
        program, inputs = build(name)
        torch.manual_seed(0)
        compiled.export_graph(program, inputs, os.path.join(out_dir, name + ".pb"))
        if name in JSON_CASES:
            program, inputs = build(name)
            torch.manual_seed(0)
            compiled.export_graph(program, inputs, os.path.join(out_dir, name + ".json"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=HERE, help="output directory (default: next to this script)")
    args = parser.parse_args(argv)
    regenerate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
