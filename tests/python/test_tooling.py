"""Tooling: sanitizer and fuzz builds follow BUILD=, so two trees can run
side by side; the daemon's cache directory and files are private."""

import os
import stat
import subprocess

import compiled  # noqa: F401  (makes compiled.v1 importable)

from daemon_util import BIN, BUILD, SRC, Daemon, compile_request, load_graph, run_compile


def dry_run(target, build):
    out = subprocess.run(["make", "-n", "-C", SRC, target, "BUILD=" + build],
                         capture_output=True, text=True)
    return out.stdout + out.stderr


def test_asan_and_fuzz_follow_build(tmp_path):
    b = str(tmp_path / "elsewhere")
    asan = dry_run("asan", b)
    assert "BUILD=%s/asan" % b in asan, asan
    fuzz = dry_run("fuzz", b)
    assert "BUILD=%s/fuzz" % b in fuzz, fuzz
    assert "run.sh %s/fuzz/fuzz/" % b in fuzz and " %s/fuzz " % b in fuzz, fuzz
    assert "build/asan" not in asan and "build/fuzz" not in fuzz
    with open(os.path.join(SRC, "tests", "fuzz", "run.sh")) as f:
        assert "build/fuzz" not in f.read()


def test_cache_directory_and_files_are_private(tmp_path):
    old = os.umask(0o022)
    try:
        d = Daemon(tmp_path, cache_dir=str(tmp_path / "new" / "cache"))
        d.start()
        try:
            run_compile(d.stub(), compile_request(load_graph("mlp")))
            cache = d.cache_dir
            assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
            names = sorted(os.listdir(cache))
            assert "cache.db" in names and "cache.db-wal" in names, names
            for n in names:
                st = os.stat(os.path.join(cache, n))
                want = 0o700 if stat.S_ISDIR(st.st_mode) else 0o600
                assert stat.S_IMODE(st.st_mode) == want, "%s is %o" % (n, st.st_mode)
        finally:
            d.stop()
    finally:
        os.umask(old)


def test_help_and_docs_cover_the_hardening_settings():
    out = subprocess.run([BIN, "--help"], capture_output=True, text=True).stdout
    with open(os.path.join(SRC, "docs", "operations.md")) as f:
        ops = f.read()
    for name in ("max-connections", "idle-timeout", "keepalive", "memory-budget",
                 "inline-decode-bytes", "decode-threads", "max-nodes"):
        assert "--" + name in out, name
        assert "`%s`" % name in ops, name
    bad = subprocess.run([BIN, "--memory-budget", "1M"], capture_output=True, text=True)
    assert bad.returncode == 2 and "memory-budget" in bad.stderr


def _undefined_symbols(lib):
    out = subprocess.run(["nm", "-u", "--format=just-symbols", lib],
                         capture_output=True, text=True, check=True).stdout
    return {s.split("@")[0] for s in out.split()}


def test_compiler_library_runs_no_process():
    """The compiler library promises no process and no file I/O
    (docs/design.md): the toolchain and its identity come from the caller
    (common/spawn.c). Its object code calls nothing that starts a
    program."""
    lib = os.path.join(BUILD, "lib", "libcdcompiler.a")
    spawners = {"posix_spawn", "posix_spawnp", "fork", "vfork", "execv", "execvp",
                "execve", "execl", "execlp", "system", "popen", "waitpid", "kill"}
    assert not (_undefined_symbols(lib) & spawners)


def test_daemon_includes_no_client_code():
    """What both ends of a call need (status names, message packing, the
    GraphError trailer) is common/: the daemon never includes client/."""
    offenders = []
    for name in sorted(os.listdir(os.path.join(SRC, "daemon"))):
        if name.endswith((".c", ".h")):
            with open(os.path.join(SRC, "daemon", name)) as f:
                for line in f:
                    if line.startswith("#include") and '"client/' in line:
                        offenders.append(f"daemon/{name}: {line.strip()}")
    assert not offenders
