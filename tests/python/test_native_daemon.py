"""The daemon's native back half: C compiler failures and time limits,
reproducible artifacts, what gets native code.

A C compiler that fails, hangs or crashes never fails a compile: the
artifact is served with its ATen program and a diagnostic carrying the
compiler's first error lines, and the failure is counted in Stats.
"""

import hashlib
import os
import stat

import pytest

import compiled  # noqa: F401  (makes compiled.v1 importable)
from compiled.v1 import artifact_pb2, compiled_pb2

from daemon_util import compile_request, load_graph, run_compile

SERVED = compiled_pb2.Served


def fake_cc(tmp_path, body, version='echo "fake-cc 1.0"; exit 0'):
    """A C compiler that answers --version with `version` and runs `body`
    for a build."""
    path = tmp_path / "fake-cc.sh"
    path.write_text('#!/bin/sh\nif [ "$1" = --version ]; then %s; fi\n%s\n' % (version, body))
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def artifact_of(result):
    art = artifact_pb2.Artifact()
    art.ParseFromString(result.artifact)
    return art


def test_native_code_is_built_and_stats_count_it(daemon):
    d = daemon()
    _, r = run_compile(d.stub(), compile_request(load_graph("attention")))
    art = artifact_of(r)
    assert art.HasField("native_program")
    np_ = art.native_program
    assert np_.code.shared_object.startswith(b"\x7fELF")
    assert list(np_.code.entry_symbols) == [f"gc_seg{i}" for i in range(len(np_.code.entry_symbols))]
    assert np_.summary.kernels >= 1 and np_.summary.nodes == len(art.program.instructions)
    assert [t.stage for t in r.timings if t.stage in ("lower", "schedule", "plan", "codegen",
                                                     "cc", "emit-native")] == \
        ["lower", "schedule", "plan", "codegen", "cc", "emit-native"]
    s = d.stats()
    assert s.native_compiles == 1 and s.native_failures == 0


@pytest.mark.parametrize("body,expect", [
    ("echo 'k.c:7:3: error: a made-up failure' >&2; exit 1", "a made-up failure"),
    ("kill -SEGV $$", "killed by signal"),
    ("exit 0", "cannot read the shared object"),
])
def test_c_compiler_failures_serve_the_aten_program(daemon, tmp_path, body, expect):
    d = daemon("--cc", fake_cc(tmp_path, body))
    _, r = run_compile(d.stub(), compile_request(load_graph("mlp")))
    assert r.served == SERVED.SERVED_COMPILED
    art = artifact_of(r)
    assert not art.HasField("native_program")
    assert len(art.program.instructions) > 0
    diag = " ".join(x.message for x in art.diagnostics)
    assert "no native code" in diag and "cc:" in diag and expect in diag, diag
    assert d.stats().native_failures == 1
    assert "failed at cc" in d.log()


def test_a_hanging_c_compiler_is_killed_after_its_time_limit(daemon, tmp_path):
    d = daemon("--cc", fake_cc(tmp_path, "sleep 30"), "--cc-timeout", "1")
    _, r = run_compile(d.stub(), compile_request(load_graph("mlp")), timeout=20)
    art = artifact_of(r)
    assert not art.HasField("native_program")
    assert any("did not finish within 1 s" in x.message for x in art.diagnostics)
    cc_us = [t.micros for t in r.timings if t.stage == "cc"]
    assert cc_us and cc_us[0] < 10_000_000


def test_a_c_compiler_that_hangs_on_version_does_not_hang_the_start(daemon, tmp_path):
    d = daemon("--cc", fake_cc(tmp_path, "exit 1", version="sleep 30"), "--cc-timeout", "1")
    assert "did not answer within 1000 ms" in d.log()
    assert "'unknown'" in d.log()


def test_build_directories_are_private_and_removed(daemon):
    d = daemon()
    run_compile(d.stub(), compile_request(load_graph("layer_norm")))
    tmp = os.path.join(d.cache_dir, "tmp")
    assert stat.S_IMODE(os.stat(tmp).st_mode) == 0o700
    assert os.listdir(tmp) == []


def test_the_same_key_gives_the_same_artifact_bytes(daemon):
    a, b = daemon(), daemon()
    _, ra = run_compile(a.stub(), compile_request(load_graph("attention")))
    _, rb = run_compile(b.stub(), compile_request(load_graph("attention")))
    assert ra.key == rb.key
    assert hashlib.sha256(ra.artifact).hexdigest() == hashlib.sha256(rb.artifact).hexdigest()
    assert artifact_of(ra).HasField("native_program")


def test_training_and_opt_level_0_programs_have_no_native_code(daemon):
    d = daemon()
    req = compile_request(load_graph("mlp"))
    req.options.mode = compiled_pb2.MODE_TRAINING
    _, r = run_compile(d.stub(), req)
    assert not artifact_of(r).HasField("native_program")
    req = compile_request(load_graph("mlp"))
    req.options.opt_level = compiled_pb2.OPT_LEVEL_O0
    _, r = run_compile(d.stub(), req)
    assert not artifact_of(r).HasField("native_program")
    d2 = daemon("--native=0")
    _, r = run_compile(d2.stub(), compile_request(load_graph("attention")))
    assert not artifact_of(r).HasField("native_program")
