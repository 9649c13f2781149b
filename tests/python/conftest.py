"""Fixtures shared by the daemon test files."""

import os

import pytest

# The tests check native code: they run it from the first call on, instead
# of measuring it against the ATen program (compiled.choice; test_choice.py
# measures).
os.environ.setdefault("COMPILED_CHOOSE", "0")

from daemon_util import Daemon


@pytest.fixture
def daemon(tmp_path):
    """make(*args, cache_dir=None, nofile=None) starts a daemon with those
    settings in its own folder under tmp_path; all are stopped (and checked
    for a clean exit) at the end of the test."""
    ds = []

    def make(*args, **kw):
        d = Daemon(tmp_path / ("d%d" % len(ds)), *args, **kw)
        os.makedirs(d.dir, exist_ok=True)
        ds.append(d)
        return d.start()

    yield make
    for d in ds:
        if d.proc is not None:
            d.stop()


@pytest.fixture(scope="module")
def server(request, tmp_path_factory):
    """The address of one daemon that all tests of a file share, started with
    the file's SERVER_ARGS (by default --verify-ir: the IR verifier after
    every pass); stopped (and checked for a clean exit) after the file."""
    args = getattr(request.module, "SERVER_ARGS", ("--verify-ir",))
    name = request.module.__name__.rpartition(".")[2]
    d = Daemon(tmp_path_factory.mktemp(name), *args).start()
    yield d.address
    d.stop()


@pytest.fixture
def fresh_dynamo():
    """Resets torch._dynamo's caches before and after the test, so that each
    test sees its own graphs (pytestmark = usefixtures("fresh_dynamo"))."""
    import torch
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
