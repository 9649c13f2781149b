"""Per-client limits (--max-client-calls, --max-client-bytes): one client
cannot take the daemon from the others. A client is a token's name, else
the peer's address."""

import concurrent.futures
import os
import time

import grpc
import pytest

from compiled.v1 import compiled_pb2
from daemon_util import compile_request, load_graph, run_compile, variant


def md(tok):
    return (("authorization", "Bearer " + tok),)


def test_calls_per_client(daemon, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("compile busy-client-token-0001 busy\ncompile other-client-token-0002 other\n")
    os.chmod(tokens, 0o600)
    d = daemon("--tokens", str(tokens), "--max-client-calls", "2",
               "--debug-compile-delay-ms", "1500")
    stub = d.stub()
    gm = load_graph("mlp_block")
    busy, other = md("busy-client-token-0001"), md("other-client-token-0002")
    with concurrent.futures.ThreadPoolExecutor(2) as ex:
        slow = [ex.submit(lambda t=t: list(stub.Compile(compile_request(variant(gm, t)),
                                                        timeout=60, metadata=busy)))
                for t in ("x", "y")]
        deadline = time.time() + 10  # until both are open
        while stub.Stats(compiled_pb2.StatsRequest(), timeout=10,
                         metadata=other).running + \
                stub.Stats(compiled_pb2.StatsRequest(), timeout=10,
                           metadata=other).queued < 2:
            assert time.time() < deadline
            time.sleep(0.02)
        with pytest.raises(grpc.RpcError) as e:
            stub.Stats(compiled_pb2.StatsRequest(), timeout=10, metadata=busy)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "client token busy has 2 calls open" in e.value.details()
        # the other client is not held back
        assert stub.Stats(compiled_pb2.StatsRequest(), timeout=10,
                          metadata=other).rejected_client == 1
        for f in slow:
            f.result()
    # the busy client's calls are given back when they end
    assert stub.Stats(compiled_pb2.StatsRequest(), timeout=10, metadata=busy).compiles == 2


def test_bytes_per_client(daemon):
    """A request may not take the request bytes its client's calls hold
    (not yet decoded) past the limit; a lone request is left to the memory
    budget."""
    d = daemon("--max-client-bytes", "1K", "--inline-decode-bytes", "0",
               "--debug-decode-delay-ms", "1500")
    gm = load_graph("mlp_block")
    req = compile_request(variant(gm, "big"))
    assert req.ByteSize() > 1024
    stub = d.stub()
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        first = ex.submit(run_compile, stub, req)  # alone: admitted
        deadline = time.time() + 10
        while d.stats().memory_in_use == 0:  # its bytes are held
            assert time.time() < deadline
            time.sleep(0.02)
        with pytest.raises(grpc.RpcError) as e:
            run_compile(stub, compile_request(variant(gm, "second")))
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-client-bytes" in e.value.details()
        assert first.result()[1].served == compiled_pb2.SERVED_COMPILED
    s = d.stats()  # calls without request bytes still pass
    assert s.rejected_client == 1 and s.compiles == 1
