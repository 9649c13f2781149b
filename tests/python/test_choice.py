"""Native code or the ATen program, chosen by measurement (compiled.choice):
the first calls alternate, the faster program wins, the choice is recorded
for the next process, random programs are never switched."""

import time

import pytest
import torch

import compiled
from compiled import choice


# The shared daemon (conftest.py's server) without --verify-ir.
SERVER_ARGS = ()


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COMPILED_CODE_CACHE", str(tmp_path / "code"))
    monkeypatch.delenv("COMPILED_CHOOSE", raising=False)


def _slow(delay):
    def fn(x):
        time.sleep(delay)
        return x + 1
    return fn


@pytest.mark.parametrize("native_delay, aten_delay, winner",
                         [(0.02, 0.0, "aten"), (0.0, 0.02, "native")])
def test_the_faster_program_wins_and_is_remembered(native_delay, aten_delay, winner):
    native, aten = _slow(native_delay), _slow(aten_delay)
    built = []

    def build():
        built.append(1)
        return aten

    summary = {"runs": "native"}
    fn = choice.choose("k" * 64, native, build, summary)
    calls = 2 * (choice.WARMUP + choice.ROUNDS)
    for i in range(calls):
        assert fn(i) == i + 1          # every call is the caller's result
    assert summary["runs"] == winner
    assert len(built) == 1
    # decided: later calls run the winner only
    assert fn(10) == 11
    # a new process (a new choose()) reads the record and measures nothing
    summary2 = {"runs": "native"}
    fn2 = choice.choose("k" * 64, native, build, summary2)
    assert fn2 is (aten if winner == "aten" else native)
    assert summary2["runs"] == winner
    assert choice.recorded("k" * 64) == winner


def test_choose_0_and_aten_settings(monkeypatch):
    native, aten = _slow(0), _slow(0)
    monkeypatch.setenv("COMPILED_CHOOSE", "0")
    assert choice.choose("a" * 64, native, lambda: aten, {}) is native
    monkeypatch.setenv("COMPILED_CHOOSE", "aten")
    summary = {}
    assert choice.choose("a" * 64, native, lambda: aten, summary) is aten
    assert summary["runs"] == "aten"


def test_a_compiled_function_measures_and_keeps_eagers_results(server):
    def f(x):
        return torch.nn.functional.silu(x) * 2 + x.mean()

    x = torch.randn(64)
    cf = compiled.compile(f, (x,), server=server)
    assert cf.summary()["runs"] == "measuring"
    for _ in range(2 * (choice.WARMUP + choice.ROUNDS) + 2):
        y = torch.randn(64)
        torch.testing.assert_close(cf(y), f(y))
    assert cf.summary()["runs"] in ("native", "aten")
    assert set(cf.summary()["measured_ms"]) == {"native", "aten"}


def test_a_program_drawing_random_numbers_keeps_native_code(server):
    def f(x):
        return torch.nn.functional.dropout(x, 0.5, True) + 1

    cf = compiled.compile(f, (torch.randn(64),), server=server)
    assert cf.summary()["runs"] == "native"
