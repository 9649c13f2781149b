"""Random numbers drawn by generated code (compiler/lower/random.c).

By default a compiled program draws dropout's mask itself: one int64 seed
from torch's generator per call (an ATen ``randint``), then Philox4x32-10
keyed by the seed over each element's row-major index (one Philox call
serving four indices). These tests check
the numbers against an independent Python Philox (itself checked against
the published known answer), the distribution, reproducibility under
``torch.manual_seed``, gradients through a native mask, and that
``eager_random=True`` keeps eager's numbers instead.
"""

import math

import pytest
import torch

import compiled

F = torch.nn.functional
MASK32 = 0xFFFFFFFF


def philox4x32_10(key, ctr):
    """Philox4x32-10 (Salmon et al., SC 2011) on a 64-bit key and a 128-bit
    counter given as four 32-bit words; returns the four output words."""
    c = list(ctr)
    k0, k1 = key & MASK32, key >> 32
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k0) & MASK32, p1 & MASK32,
             ((p0 >> 32) ^ c[3] ^ k1) & MASK32, p0 & MASK32]
        k0, k1 = (k0 + 0x9E3779B9) & MASK32, (k1 + 0xBB67AE85) & MASK32
    return c


def test_reference_philox_matches_the_published_known_answer():
    # Random123's kat_vectors: philox4x32_10, counter 0, key 0
    assert philox4x32_10(0, [0, 0, 0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def compile_native(fn, args, server, **kw):
    with torch.no_grad():
        cf = compiled.compile(fn, args, server=server, **kw)
        cf(*args)
    return cf


def philox_uniform_bits(seed, i):
    """The 24 bits of element i's uniform: one Philox call serves four
    counters, i is word (i >> 6) & 3 of the call on ((i >> 8) << 6) |
    (i & 63) (compiler/codegen/cexpr.c, gc_rand_u01 and gc_rand_block)."""
    q = ((i >> 8) << 6) | (i & 63)
    return philox4x32_10(seed, [q & MASK32, q >> 32, 0, 0])[(i >> 6) & 3] >> 8


def expected_mask(seed, n, p):
    return torch.tensor([float(philox_uniform_bits(seed, i) < math.ceil(p * 2 ** 24))
                         for i in range(n)])


@pytest.mark.parametrize("shape,transposed", [
    ((3, 70), False),   # rows of 70: blocks shared by rows, vector tails
    ((1000,), False),   # one loop: whole blocks of 256 and a partial one
    ((40, 20), True),   # read across rows: one value at a time
])
def test_mask_is_philox_of_a_seed_from_torchs_generator(server, shape, transposed):
    """The mask of bernoulli(x, p) is u < p elementwise, u the top 24 bits
    of a Philox word for the element's row-major index, keyed by the seed
    randint(0, 2^62) draws from torch's generator at the call; the same
    numbers whether a kernel fills them a block at a time or one at a
    time."""
    def f(x):
        m = torch.bernoulli(x, 0.3)
        return (m.t() * 2).contiguous() if transposed else m

    x = torch.empty(*shape)
    cf = compile_native(f, (x,), server)
    s = cf.summary()
    assert s["runs"] == "native" and s["fallback"] == 0, s
    src = cf.programs[-1].c_source
    assert ("gc_rand_u01((" in src) == transposed and ("gc_rand_fill((" in src) != transposed
    torch.manual_seed(7)
    out = cf(x)
    torch.manual_seed(7)
    seed = torch.randint(0, 1 << 62, (1,)).item()
    want = expected_mask(seed, x.numel(), 0.3).view(shape)
    if transposed:
        want = want.t() * 2
    assert torch.equal(out, want)
    assert out.dtype == x.dtype


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_keeps_each_element_with_probability_1_minus_p(server, p):
    def f(x):
        return F.dropout(x, p, training=True)

    x = torch.ones(512, 1024)
    cf = compile_native(f, (x,), server)
    assert cf.summary()["fallback"] == 0, cf.summary()
    n = x.numel()
    sigma = math.sqrt(p * (1 - p) / n)
    with torch.no_grad():
        for _ in range(3):
            y = cf(x)
            kept = y != 0
            assert abs(kept.float().mean().item() - (1 - p)) < 6 * sigma
            # kept values are scaled as eager scales them
            assert torch.equal(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
            # no visible structure: neighbours and rows are independent
            k = kept.float() - kept.float().mean()
            corr = (k[:, 1:] * k[:, :-1]).mean() / k.var()
            assert abs(corr.item()) < 6 / math.sqrt(n)
            corr = (k[1:] * k[:-1]).mean() / k.var()
            assert abs(corr.item()) < 6 / math.sqrt(n)


def test_reproducible_under_manual_seed_and_fresh_at_every_call(server):
    def f(x):
        return F.dropout(x, 0.5, training=True)

    x = torch.ones(64, 256)
    cf = compile_native(f, (x,), server)
    with torch.no_grad():
        torch.manual_seed(3)
        a, b = cf(x), cf(x)
        torch.manual_seed(3)
        c = cf(x)
    assert torch.equal(a, c)
    assert not torch.equal(a, b)
    # two calls' masks are independent of each other
    ka, kb = (a != 0).float(), (b != 0).float()
    agree = (ka == kb).float().mean().item()
    assert abs(agree - 0.5) < 6 * math.sqrt(0.25 / x.numel())


@pytest.mark.parametrize("shape", [(1000, 70), (20001,)])
def test_the_mask_does_not_depend_on_the_thread_count(server, shape):
    """Each thread fills the blocks of its share of the loop: one thread or
    two, the numbers are the same, and Philox's. Rows of 70 (a 2-D loop:
    the row vector's broadcast keeps it from being flattened) share
    blocks of 256, which each thread keeps its last one of."""
    def f(x, b):
        return torch.bernoulli(x, 0.5) * b

    x = torch.empty(*shape)
    b = torch.ones(shape[-1])
    cf = compile_native(f, (x, b), server)
    src = cf.programs[-1].c_source
    assert "gc_rand_fill((" in src
    assert "+= 256) {" in src  # the inner loop in blocks
    threads = torch.get_num_threads()
    try:
        masks = []
        for n in (1, 2):
            torch.set_num_threads(n)
            torch.manual_seed(11)
            masks.append(cf(x, b))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(masks[0], masks[1])
    torch.manual_seed(11)
    seed = torch.randint(0, 1 << 62, (1,)).item()
    assert torch.equal(masks[0].flatten(), expected_mask(seed, x.numel(), 0.5))


def test_eager_random_keeps_eagers_numbers(server):
    def f(x):
        return F.dropout(x, 0.5, training=True)

    x = torch.randn(64, 256)
    native = compile_native(f, (x,), server)
    eager_rng = compile_native(f, (x,), server, eager_random=True)
    assert native.programs[-1].key != eager_rng.programs[-1].key
    assert "aten::bernoulli.p" in eager_rng.summary()["fallback_ops"]
    with torch.no_grad():
        torch.manual_seed(5)
        want = f(x)
        torch.manual_seed(5)
        got = eager_rng(x)
    assert torch.equal(got, want)


def test_gradients_flow_through_a_native_mask(server):
    """Training with the generated mask: the forward's output shows the mask
    (a linear layer's outputs are nonzero), and the backward's gradients
    are what eager computes with that mask."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Dropout(0.25)).train()
    x = torch.randn(8, 16)
    proj = torch.randn(8, 32)
    cf = compiled.compile(model, (x,), server=server)
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        y = cf(x)
        (y * proj).sum().backward()
        mask = (y != 0).float()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        y_ref = model[0](x) * mask / 0.75
        (y_ref * proj).sum().backward()
        torch.testing.assert_close(y.detach(), y_ref.detach())
        for g, p in zip(grads, model.parameters()):
            torch.testing.assert_close(g, p.grad)
    s = cf.summary()
    assert s["runs"] == "native" and s["fallback"] == 0, s
    assert 0.6 < mask.mean().item() < 0.9


_PHILOX_CHECK = r"""
#include <stdio.h>
#include <string.h>
int main(void) {
  static const uint64_t keys[] = {0, 1, 0xffffffffffffffffull,
                                  0x123456789abcdef0ull, 1ull << 62};
  /* counters from 0, across 2^32 and 2^38 (the high word of the call's
   * counter: 256 counters a block of 64 calls) and up to 2^64 */
  static const uint64_t starts[] = {0, 5, (1ull << 32) - 300,
                                    (1ull << 38) - 300,
                                    0xffffffffffffffffull - 2100};
  static float out[2048 + 1];
  for (int k = 0; k < 5; k++)
    for (int s = 0; s < 5; s++) {
      gc_rand_fill(keys[k], starts[s], 2048, out);
      for (int i = 0; i < 2048; i++) {
        float one = gc_rand_u01(keys[k], starts[s] + (uint64_t)i);
        if (memcmp(&one, &out[i], sizeof one)) {
          printf("differ %d %d %d\n", k, s, i);
          return 1;
        }
        printf("%u\n", (unsigned)(out[i] * 16777216.0f));
      }
    }
  return 0;
}
"""


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def test_every_isa_draws_the_same_philox_numbers(server, tmp_path):
    """The random-number code at the head of every generated program, built
    for each x86-64 level this CPU runs (its AVX2 build has its own block
    loop, its AVX-512 build 64-bit lanes): a block at a time equals one at
    a time, bit for bit, for keys and counters from 0 to 2^64 (counters
    past 2^38 reach the high word of Philox's counter), the same numbers
    on every level, and Philox's (the Python reference, for a sample)."""
    import platform
    import shutil
    import subprocess
    if platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 levels only")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    cf = compile_native(lambda x: torch.bernoulli(x, 0.3), (torch.empty(300),), server)
    src = cf.programs[-1].c_source
    start = src.index("static void gc_rand_fill(")
    end = src.index("\n}\n", start) + 3
    (tmp_path / "philox.c").write_text(src[:end] + _PHILOX_CHECK)
    flags = _cpu_flags()
    levels = ["x86-64-v2"]
    if {"avx2", "fma", "bmi2"} <= flags:
        levels.append("x86-64-v3")
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
        levels.append("x86-64-v4")
    outputs = {}
    for level in levels:
        exe = tmp_path / level
        subprocess.run([cc, "-O3", "-std=gnu11", "-fopenmp", "-fwrapv", f"-march={level}",
                        str(tmp_path / "philox.c"), "-o", str(exe)], check=True)
        run = subprocess.run([str(exe)], capture_output=True, text=True)
        assert run.returncode == 0, (level, run.stdout[-200:])
        outputs[level] = run.stdout
    assert len(set(outputs.values())) == 1, "levels differ"
    got = [int(v) for v in outputs[levels[0]].split()]
    keys = [0, 1, 0xFFFFFFFFFFFFFFFF, 0x123456789ABCDEF0, 1 << 62]
    starts = [0, 5, (1 << 32) - 300, (1 << 38) - 300, 0xFFFFFFFFFFFFFFFF - 2100]
    n = 0
    for k, key in enumerate(keys):
        for s, first in enumerate(starts):
            for i in range(0, 2048, 61):
                want = philox_uniform_bits(key, first + i)
                assert got[(k * 5 + s) * 2048 + i] == want, (key, first + i)
                n += 1
    assert n > 800
