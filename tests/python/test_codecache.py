"""The per-user cache of generated Python's code objects
(compiled/codecache.py)."""

import builtins
import os
import subprocess
import sys
import traceback

import pytest

from compiled import codecache

SOURCE = """\
def program(a, b):
    def inner(x):
        return x * 2 + BASE
    return inner(a) - b
"""


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "code"
    monkeypatch.setenv("COMPILED_CODE_CACHE", str(d))
    return d


def run(code, **globals_):
    scope = dict(globals_)
    exec(code, scope)
    return scope["program"]


def test_a_second_load_reads_the_code_object_back(cache, monkeypatch):
    first = codecache.compile_cached(SOURCE, "<p #1>")
    assert run(first, BASE=1)(3, 1) == 6
    entries = os.listdir(cache)
    assert len(entries) == 1 and oct(os.stat(cache).st_mode & 0o777) == "0o700"

    def no_compile(*a, **k):
        raise AssertionError("compiled again")
    monkeypatch.setattr(builtins, "compile", no_compile)
    again = codecache.compile_cached(SOURCE, "<p #2>")
    monkeypatch.undo()
    assert run(again, BASE=10)(3, 1) == 15
    # renamed throughout: a traceback from the nested function names the
    # caller's file, not the process's that wrote the entry
    assert again.co_filename == "<p #2>"
    try:
        run(again, BASE=None)(3, 1)
    except TypeError:
        frames = traceback.extract_tb(sys.exc_info()[2])
    assert [f.filename for f in frames[-2:]] == ["<p #2>", "<p #2>"]


def test_another_source_is_another_entry(cache):
    codecache.compile_cached(SOURCE, "<a>")
    other = codecache.compile_cached(SOURCE.replace("* 2", "* 3"), "<b>")
    assert run(other, BASE=0)(3, 1) == 8
    assert len(os.listdir(cache)) == 2


def test_a_corrupt_or_foreign_entry_is_compiled_afresh(cache):
    codecache.compile_cached(SOURCE, "<a>")
    (entry,) = cache.iterdir()
    good = entry.read_bytes()
    for bad in [good[:-7], b"", b"\x00" * 40 + good[40:], good[:16] + b"garbage" * 9]:
        entry.write_bytes(bad)
        assert run(codecache.compile_cached(SOURCE, "<a>"), BASE=1)(3, 1) == 6
        assert entry.read_bytes() == good, "the entry was not rewritten"


def test_a_directory_others_can_write_is_not_used(tmp_path, monkeypatch):
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o777)
    monkeypatch.setenv("COMPILED_CODE_CACHE", str(d))
    assert codecache.directory() is None
    assert run(codecache.compile_cached(SOURCE, "<a>"), BASE=1)(3, 1) == 6
    assert os.listdir(d) == []


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    for off in ["off", "0", ""]:
        monkeypatch.setenv("COMPILED_CODE_CACHE", off)
        assert codecache.directory() is None
        assert run(codecache.compile_cached(SOURCE, "<a>"), BASE=1)(3, 1) == 6
    assert os.listdir(tmp_path) == []
    monkeypatch.delenv("COMPILED_CODE_CACHE")
    assert codecache.directory() == str(tmp_path / "xdg" / "compiled" / "code")


def test_at_most_max_entries_are_kept(cache, monkeypatch):
    monkeypatch.setattr(codecache, "MAX_ENTRIES", 3)
    for i in range(6):
        codecache.compile_cached(SOURCE.replace("* 2", f"* {i}"), "<a>")
        os.utime(max(cache.iterdir(), key=os.path.getmtime), (i, 1000 + i))
    assert len(os.listdir(cache)) == 3
    # the newest stay: reading them compiles nothing
    monkeypatch.setattr(builtins, "compile", None)
    for i in (3, 4, 5):
        assert run(codecache.compile_cached(SOURCE.replace("* 2", f"* {i}"), "<a>"),
                   BASE=0)(1, 0) == i


def test_a_dead_writers_temporary_file_goes_after_an_hour(cache):
    codecache.compile_cached(SOURCE, "<a>")
    old, young = cache / ".tmp-old", cache / ".tmp-young"
    old.write_bytes(b"partial")
    young.write_bytes(b"partial")
    os.utime(old, (1000, 1000))
    codecache.compile_cached(SOURCE.replace("* 2", "* 5"), "<b>")  # a write prunes
    assert not old.exists() and young.exists()
    assert len([n for n in os.listdir(cache) if not n.startswith(".tmp-")]) == 2


def test_a_program_loads_from_the_cache_in_a_new_process(tmp_path, daemon):
    """Two processes compile the same function: the second reads the
    program's code object instead of compiling it, and computes the same."""
    script = r"""
import builtins, sys, torch
import compiled.runtime as runtime
calls = []
real = builtins.compile
def counting(src, filename, *a, **k):
    calls.append(filename)
    return real(src, filename, *a, **k)
builtins.compile = counting
import compiled
fn = lambda x, y: (x * y).relu().sum(0)
x, y = torch.randn(8, 5), torch.randn(8, 5)
cf = compiled.compile(fn, (x, y), server=sys.argv[1])
assert torch.allclose(cf(x, y), fn(x, y))
print(sum(1 for f in calls if f.startswith("<compiled program")))
"""
    address = daemon().address
    env = dict(os.environ, COMPILED_CODE_CACHE=str(tmp_path / "code"))
    counts = [subprocess.run([sys.executable, "-c", script, address], env=env, check=True,
                             capture_output=True, text=True).stdout.split()[-1]
              for _ in range(2)]
    assert counts == ["1", "0"]
