"""The daemon's log cannot be forged by what a client sends.

Client strings reach the log inside error messages (value names, operator
names, device types...). In the text format they are escaped, so a request
cannot end its line and write a fake one; in the JSON format, a string that
is not valid UTF-8 is escaped instead of dropping the field. State-changing
calls (Evict) name their peer.
"""

import json
import time

import grpc

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.v1 import compiled_pb2

from daemon_util import load_graph

import pytest

# 63 characters: the daemon quotes at most 64 of a device type.
FORGED = "\n2026-01-01T00:00:00Z info  Compile hit peer=ipv4:10.0.0.1\r\x1b\x07\"\\"


def with_device(device):
    """add_inplace with the device type of its first value replaced."""
    gm = load_graph("add_inplace")
    gm.graph.tensor_values[0].meta.device.type = device
    return gm


def compile_raw(d, data):
    """Sends serialized CompileRequest bytes; returns the RpcError."""
    call = d.channel().unary_stream(
        "/compiled.v1.Compiler/Compile", request_serializer=lambda b: b,
        response_deserializer=compiled_pb2.CompileEvent.FromString)
    with pytest.raises(grpc.RpcError) as e:
        list(call(data, timeout=30))
    return e.value


def wait_log(d, needle):
    deadline = time.time() + 10
    while needle not in d.log() and time.time() < deadline:
        time.sleep(0.05)
    return d.log()


def test_text_log_escapes_a_forged_line(daemon):
    d = daemon()
    req = compiled_pb2.CompileRequest(graph=with_device(FORGED))
    err = compile_raw(d, req.SerializeToString())
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert FORGED[:20] in err.details()  # the client gets its message unchanged
    log = wait_log(d, "Compile invalid")
    lines = [x for x in log.split("\n") if "10.0.0.1" in x]
    assert len(lines) == 1, log
    line = lines[0]
    assert " info  Compile invalid " in line and "peer=ipv4:127.0.0.1:" in line
    assert ("'\\n2026-01-01T00:00:00Z info  Compile hit peer=ipv4:10.0.0.1"
            "\\r\\e\\a\\\"\\\\'") in line, line
    for c in "\r\x1b\x07":
        assert c not in log
    # No line of the log starts with anything but the daemon's timestamp.
    assert not any(x.startswith("2026-01-01") for x in log.split("\n"))


def test_json_log_keeps_invalid_utf8_escaped(daemon):
    d = daemon("--log-format", "json")
    data = compiled_pb2.CompileRequest(graph=with_device("cpX\nY")).SerializeToString()
    data = data.replace(b"cpX\nY", b"c\xff\xfe\nY")
    err = compile_raw(d, data)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    wait_log(d, '"outcome":"invalid"')
    entries = [json.loads(x) for x in d.log().splitlines()]
    req = [e for e in entries if e.get("method") == "Compile"]
    assert len(req) == 1 and req[0]["outcome"] == "invalid", entries
    assert "error" in req[0], req[0]
    assert req[0]["peer"].startswith("ipv4:127.0.0.1:")


def test_evict_logs_its_peer(daemon):
    d = daemon()
    d.stub().Evict(compiled_pb2.EvictRequest(all=True), timeout=10)
    d.stub().Evict(compiled_pb2.EvictRequest(key="ab" * 32), timeout=10)
    log = wait_log(d, "Evict")
    ev = [x for x in log.splitlines() if " Evict " in x]
    assert len(ev) == 2, log
    assert all("peer=ipv4:127.0.0.1:" in x for x in ev), ev
    assert 'detail="all: 0 entries, 0 bytes freed"' in ev[0], ev
    assert "key=abababababababab" in ev[1] and 'detail="key: 0 entries' in ev[1], ev
