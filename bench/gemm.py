#!/usr/bin/env python3
"""Matrix products: oneDNN's sgemm against eager's (`make bench-gemm`).

Not a test. Compiled programs call oneDNN's sgemm for float32 mm and
addmm on AVX-512 targets (docs/codegen.md, "Matrix products through
oneDNN"); eager's torch.mm calls the BLAS torch was built with (OpenBLAS on
Debian). This times both on the same operands in one process, 2 threads,
median of many calls each, alternating, for the products of bench-train's
models and a few others, with each operand layout (A or B transposed),
and prints the ratio. "rule" says what generated code does with that
product: "oneDNN", or "ATen" for the case sc_gemm_of leaves to eager's
library (a transposed B with a leading dimension a multiple of 512 and
16 to 127 rows of A).

oneDNN picks its code by CPU; `ONEDNN_MAX_CPU_ISA=AVX2 make bench-gemm`
measures what it does on an AVX2-only CPU (the reason products stay
eager's there). `OPENBLAS_VERBOSE=2` prints the kernels OpenBLAS chose.

    /usr/bin/python3 bench/gemm.py [--seconds S]
"""

import argparse
import ctypes
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402

import torch  # noqa: E402

# (M, K, N): bench-train's MLP (batch 128) and transformer layer (1024
# tokens, width 256, feed-forward 1024), resnet18's classifier (batch 8),
# an attention head's product, and the slow case the rule avoids
SHAPES = [(128, 784, 1024), (128, 1024, 1024), (1024, 128, 1024), (1024, 256, 768),
          (1024, 256, 1024), (1024, 1024, 256), (768, 1024, 256), (8, 512, 1000),
          (512, 8, 1000), (64, 64, 64), (64, 1024, 1024)]


def sgemm():
    lib = ctypes.CDLL("libdnnl.so.2")
    f = lib.dnnl_sgemm
    i64, flt, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
    f.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, flt, ptr, i64, ptr, i64,
                  flt, ptr, i64]
    f.restype = ctypes.c_int
    return f


def layout(t):
    """sgemm's op and leading dimension for a 2-D view with a unit stride."""
    return (b"N", t.stride(0)) if t.stride(1) == 1 else (b"T", t.stride(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=0.4,
                    help="time per side per product (4 alternating rounds)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    f = sgemm()
    rows, ratios = [], []
    for (m, k, n) in SHAPES:
        for ta, tb in ((0, 0), (0, 1), (1, 0)):
            torch.manual_seed(0)
            a = torch.randn(k, m).t() if ta else torch.randn(m, k)
            b = torch.randn(n, k).t() if tb else torch.randn(k, n)
            c_eager, c_dnnl = torch.empty(m, n), torch.empty(m, n)
            opa, lda = layout(a)
            opb, ldb = layout(b)

            def dnnl():
                if f(opa, opb, m, n, k, 1.0, a.data_ptr(), lda, b.data_ptr(), ldb, 0.0,
                     c_dnnl.data_ptr(), n):
                    raise RuntimeError("dnnl_sgemm failed")

            def eager():
                torch.mm(a, b, out=c_eager)
            eager_s, dnnl_s = benchlib.interleaved([eager, dnnl], seconds=args.seconds)
            err = (c_dnnl - c_eager).abs().max().item() / c_eager.abs().max().item()
            aten = opb == b"T" and ldb % 512 == 0 and 16 <= m < 128
            gflop = 2 * m * n * k / 1e9
            ratios.append(eager_s / dnnl_s)
            which = "+".join(x for x, t in (("A", ta), ("B", tb)) if t) or "-"
            rows.append([f"[{m} x {k}] x [{k} x {n}]", which,
                         f"{eager_s * 1e3:.3f}", f"{gflop / eager_s:.0f}",
                         f"{dnnl_s * 1e3:.3f}", f"{gflop / dnnl_s:.0f}",
                         f"{eager_s / dnnl_s:.2f}x", f"{err:.0e}", "ATen" if aten else "oneDNN"])
    print(benchlib.table(rows, ["product", "transposed", "eager ms", "GFLOP/s", "oneDNN ms",
                                "GFLOP/s", "speedup", "rel diff", "rule"]))
    print(f"geomean speedup of oneDNN's sgemm over eager's mm: {benchlib.geomean(ratios):.2f}x "
          f"over {len(ratios)} products (2 threads; transposed: which operand is read "
          "column-major)")


if __name__ == "__main__":
    main()
