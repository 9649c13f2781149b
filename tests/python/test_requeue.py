"""A compile abandoned by every waiter, then joined again just as its worker
stops, is queued and run again. Its libuv work request must not be reused
while libuv still holds the first one (that corrupted libuv's queue and
crashed the daemon with SIGSEGV, now and then, in
test_deadline_exceeded_then_served). Timing decides whether a round takes
that path, so the scenario is repeated."""

import os

import grpc
import pytest

import compiled  # noqa: F401  (makes compiled.v1 importable)

from daemon_util import Daemon, compile_request, load_graph, run_compile, variant


def test_rejoined_abandoned_compiles_never_crash(tmp_path):
    d = Daemon(tmp_path, "--debug-compile-delay-ms", "60", "--workers", "1")
    d.start()
    try:
        stub = d.stub()
        gm = load_graph("layer_norm")
        for i in range(40):
            g = variant(gm, "requeue%d" % i)
            with pytest.raises(grpc.RpcError) as e:
                run_compile(stub, compile_request(g), timeout=0.02)
            assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            _, r = run_compile(stub, compile_request(g), timeout=30)
            assert r.artifact_size > 0
            assert d.proc.poll() is None, d.output()[-3000:]
    finally:
        d.stop()
