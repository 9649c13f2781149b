"""Programs in which nothing is lowered into generated code (library calls,
fallbacks and views only): the daemon does not run the C compiler for them,
their artifact carries the native program's counts but no code
(docs/artifact.md, version 0.5), and summary() and ``compilectl lookup``
say that ATen operators run, and why.
"""

import os
import subprocess

import pytest
import torch

import compiled
import daemon_util
from compiled.v1 import artifact_pb2, compiled_pb2
from native_util import assert_same


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("native_aten_only"), "--verify-ir").start()
    yield d
    d.stop()


def no_kernels(x, y):
    return torch.mm(x, y), torch.special.erfinv(x)  # a library call, a fallback


def with_kernels(x, y):
    return torch.erf(x) * 2 + y


def compile_result(daemon, fn, args):
    """The daemon's CompileResult and the artifact of fn's graph."""
    from compiled import client, target
    captured = compiled.trace(fn, args)
    outcome = client.Client(daemon.address).compile_outcome(
        captured.graph_bytes, compiled_pb2.CompileOptions(opt_level=2),
        target=target.target_message())
    art = artifact_pb2.Artifact()
    art.ParseFromString(outcome.artifact)
    return outcome.result, art


def test_a_program_without_kernels_skips_the_c_compiler(daemon):
    """Nothing lowered into generated code (a product and an operator
    without a rule): the daemon does not run the C compiler, the artifact
    carries the native program's counts but no shared object, and
    summary() says the program runs ATen, with the counts and why."""
    x, y = torch.rand(64, 64) * 0.5, torch.randn(64, 64)
    res, art = compile_result(daemon, no_kernels, (x, y))
    stages = [t.stage for t in res.timings]
    assert "codegen" in stages and "cc" not in stages, stages
    np_ = art.native_program
    assert np_.summary.kernels == 0 and np_.summary.extern == 1 and np_.summary.fallback == 1
    assert not np_.code.shared_object and not np_.code.entry_symbols
    assert not np_.code.runtime_libraries and not np_.source_zlib

    res_k, art_k = compile_result(daemon, with_kernels, (x, y))
    assert "cc" in [t.stage for t in res_k.timings]
    assert art_k.native_program.code.shared_object
    # the C compiler is most of a small graph's compile: without it, a
    # fraction of one that runs it (same daemon, same run)
    assert res.compile_micros < 0.5 * res_k.compile_micros, \
        (res.compile_micros, res_k.compile_micros)

    with torch.no_grad():
        cf = compiled.compile(no_kernels, (x, y), server=daemon.address)
        got = cf(x, y)
    assert_same(got, no_kernels(x, y), "no kernels", atol=0, rtol=0)
    s = cf.summary()
    assert s["runs"] == "aten" and s["kernels"] == 0, s
    assert s["extern"] == 1 and s["fallback"] == 1 and s["fallback_ops"] == ["aten::erfinv"], s
    assert "nothing was lowered into generated code" in s["reason"], s
    assert cf.programs[-1].c_source == ""


def test_compilectl_lookup_says_what_runs(daemon):
    """compilectl lookup says "runs aten" for a program of ATen calls and
    "runs native" for one with generated kernels."""
    x, y = torch.rand(32, 32) * 0.5, torch.randn(32, 32)
    for fn, says in ((no_kernels, "runs aten"), (with_kernels, "runs native")):
        res, _ = compile_result(daemon, fn, (x, y))
        env = dict(os.environ)
        env.pop("COMPILED_SERVER", None)
        r = subprocess.run([os.path.join(daemon_util.BUILD, "bin", "compilectl"), "--server",
                            daemon.address, "lookup", res.key], capture_output=True, text=True,
                           timeout=60, env=env)
        assert r.returncode == 0, r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("program"))
        assert says in line, r.stdout
        if fn is no_kernels:
            assert "1 extern, 1 fallback" in line and "aten::erfinv" in r.stdout, r.stdout
