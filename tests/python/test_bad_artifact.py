"""An artifact the client cannot load (random bytes, a shared object without
the symbol the program calls) never reaches user code: compiled.compile and
the torch.compile backend warn once (ArtifactWarning, naming the key) and
run the program eagerly. The digest checks pass in these tests: the bytes
are what the daemon sent, only they are bad."""

import os
import warnings

import pytest
import torch

import compiled
import native_util
from compiled import client as client_module
from compiled.v1 import artifact_pb2


# The shared daemon (conftest.py's server) without --verify-ir.
SERVER_ARGS = ()


def _fn(x):
    return torch.tanh(x) * 2 + x


def _missing_symbol(data: bytes) -> bytes:
    art = artifact_pb2.Artifact.FromString(data)
    assert art.HasField("native_program"), "the test needs a native program"
    symbols = art.native_program.code.entry_symbols
    assert symbols
    symbols[0] = symbols[0] + "_not_there"
    return art.SerializeToString()


def _garbage(data: bytes) -> bytes:
    return os.urandom(len(data))


@pytest.mark.parametrize("spoil", [_garbage, _missing_symbol])
def test_compile_runs_eagerly_with_one_artifact_warning(server, monkeypatch, spoil):
    real = client_module.Client.compile

    def spoiled(self, *args, **kwargs):
        key, data = real(self, *args, **kwargs)
        return key, spoil(data)

    monkeypatch.setattr(client_module.Client, "compile", spoiled)
    x = torch.randn(8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = compiled.compile(_fn, (x,), server=server)
        for _ in range(3):
            torch.testing.assert_close(f(x), _fn(x))
    bad = [w for w in caught if issubclass(w.category, compiled.ArtifactWarning)]
    assert len(bad) == 1, [str(w.message) for w in caught]
    assert "could not be loaded" in str(bad[0].message)


@pytest.mark.parametrize("spoil", [_garbage, _missing_symbol])
def test_the_backend_runs_aten_with_one_artifact_warning(server, monkeypatch, spoil):
    real = client_module.Client.compile_outcome

    def spoiled(self, *args, **kwargs):
        outcome = real(self, *args, **kwargs)
        outcome.artifact = spoil(outcome.artifact)
        return outcome

    monkeypatch.setattr(client_module.Client, "compile_outcome", spoiled)
    monkeypatch.setenv("COMPILED_GRAPH_MEMO", "0")   # every compile asks the daemon
    torch._dynamo.reset()
    fast = torch.compile(_fn, backend="compiled", options={"server": server})
    x = torch.randn(8)
    native_util.one_warning(compiled.ArtifactWarning, fast, _fn, (x, x, x))
    torch._dynamo.reset()
