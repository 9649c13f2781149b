"""Every way a daemon can go away, seen from compiled.compile and the
Client: stopped gracefully (SIGTERM, as `systemctl restart` does), killed,
frozen (SIGSTOP: the kernel still accepts connections, nothing answers),
or never there. A call returns eager's result within its deadline (the
client's answer timeout for a daemon that answers nothing), and the
function compiles again once a daemon answers on the address."""

import signal
import time
import warnings

import pytest
import torch

import compiled
import compiled.frontend

ANSWER_TIMEOUT = 1.0


@pytest.fixture(autouse=True)
def quick_client(monkeypatch):
    monkeypatch.setenv("COMPILED_ANSWER_TIMEOUT", str(ANSWER_TIMEOUT))
    monkeypatch.setattr(compiled.frontend, "RETRY_FIRST", 0.0)


def _fn(x):
    return torch.sin(x) * 2 + 1


def _compile_on(address):
    # static programs: each new shape asks the daemon (with the default
    # dynamic=None, the second shape's program has a size symbol and
    # serves every later shape without it)
    f = compiled.compile(_fn, (torch.randn(4),), server=address, dynamic=False)
    assert f.compiles == 1
    return f


def _call_new_shape(f, n):
    x = torch.randn(n)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.monotonic()
        out = f(x)
        elapsed = time.monotonic() - start
    torch.testing.assert_close(out, _fn(x))
    return elapsed, [w for w in caught
                     if issubclass(w.category, compiled.DaemonUnavailableWarning)]


def _compiles_again(f, d, first_shape):
    """Calls with new shapes until one compiles (the channel reconnects
    within a few seconds); returns how many calls that took."""
    before = f.compiles
    for i in range(100):
        x = torch.randn(first_shape + i)
        torch.testing.assert_close(f(x), _fn(x))
        if f.compiles > before:
            return i + 1
        time.sleep(0.1)
    raise AssertionError(f"no compile after the daemon came back:\n{d.log()[-2000:]}")


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_a_daemon_that_stops_then_comes_back(daemon, how):
    d = daemon()
    address = d.address
    f = _compile_on(address)
    if how == "sigterm":
        assert d.stop(signal.SIGTERM) == 0
    else:
        d.stop(signal.SIGKILL, check=False)
    elapsed, warned = _call_new_shape(f, 5)
    assert len(warned) == 1, "one DaemonUnavailableWarning"
    # the same address again (the cache survives)
    d.args += ["--listen", address]
    d.start()
    _compiles_again(f, d, 6)


def test_a_frozen_daemon_costs_one_answer_timeout(daemon):
    d = daemon()
    f = _compile_on(d.address)
    # The baseline: a call that compiles a new shape on a live daemon.
    live, _ = _call_new_shape(f, 5)
    d.send_signal(signal.SIGSTOP)
    try:
        elapsed, warned = _call_new_shape(f, 6)
        assert len(warned) == 1
        # bounded by the answer timeout (plus the live compile's own cost),
        # not by the compile deadline of 600 s
        assert elapsed < ANSWER_TIMEOUT * 5 + live * 3, (elapsed, live)
        with pytest.raises(compiled.DaemonUnavailable, match="did not answer"):
            compiled.Client(d.address).compile(b"x", timeout=600)
    finally:
        d.send_signal(signal.SIGCONT)
    _compiles_again(f, d, 7)


def test_no_daemon_at_all():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % s.getsockname()[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = compiled.compile(_fn, (torch.randn(4),), server=address)
        x = torch.randn(4)
        torch.testing.assert_close(f(x), _fn(x))
    assert f.compiles == 0
    assert sum(issubclass(w.category, compiled.DaemonUnavailableWarning) for w in caught) == 1
