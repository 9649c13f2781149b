"""The compiler's build id: non-empty, and it moves with the compiler.

The build id enters every cache key (its "compiler" component). If it were
empty or blind to a source change, a daemon upgraded to a compiler that
compiles graphs differently would keep serving the old compiler's artifacts
under the same keys. These tests build a scratch copy of the tree (so the
checkout's own build is untouched), change one byte of a compiler source,
rebuild, and check that the id and the key both change; and that a source in
a sub-folder of compiler/ is built and hashed too.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

SRC = os.environ.get("COMPILED_SRC", os.getcwd())
BUILD = os.environ.get("COMPILED_BUILD", os.path.join(SRC, "build"))
GRAPH = os.path.join(SRC, "tests", "data", "graphs", "mlp.pb")
ID_RE = re.compile(r"\(compiler build ([0-9a-f]{32})\)")


def version_id(binary):
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout
    m = ID_RE.search(out)
    assert m, f"{binary} --version printed no 32-hex-digit build id: {out!r}"
    return m.group(1)


def test_installed_binaries_have_a_build_id():
    a = version_id(os.path.join(BUILD, "bin", "compiled"))
    b = version_id(os.path.join(BUILD, "bin", "compilectl"))
    assert a == b
    with open(os.path.join(BUILD, "gen", "build_id.h")) as f:
        assert f'"{a}"' in f.read()


def _ignore(directory, names):
    skip = {"build", "var", ".git", "__pycache__", ".pytest_cache"}
    return [n for n in names if n in skip or n.startswith("build")]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    """A copy of the source tree with its own build directory."""
    root = tmp_path_factory.mktemp("tree") / "src"
    shutil.copytree(SRC, root, ignore=_ignore, symlinks=True)
    return root


def build_ctl(tree):
    r = subprocess.run(["make", "-j2", "-s", "BUILD=b", "b/bin/compilectl"], cwd=tree,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ctl = os.path.join(tree, "b", "bin", "compilectl")
    key = json.loads(subprocess.run([ctl, "graph", "hash", "--json", GRAPH], capture_output=True,
                                    text=True, check=True).stdout)
    return version_id(ctl), key


def test_one_byte_in_a_compiler_source_changes_id_and_key(scratch):
    id1, key1 = build_ctl(scratch)
    # A rebuild without changes keeps the id (it is a digest, not a stamp).
    id1b, key1b = build_ctl(scratch)
    assert id1b == id1 and key1b["key"] == key1["key"]

    with open(scratch / "compiler" / "symexpr.c", "a") as f:
        f.write("\n")
    id2, key2 = build_ctl(scratch)
    assert id2 != id1
    assert key2["components"]["compiler"] != key1["components"]["compiler"]
    assert key2["key"] != key1["key"]
    # Nothing but the compiler component moved.
    for part in ("graph", "inputs", "options", "target", "schema"):
        assert key2["components"][part] == key1["components"][part], part


def test_sources_in_compiler_subfolders_are_built_and_hashed(scratch):
    id1, _ = build_ctl(scratch)
    sub = scratch / "compiler" / "probe_sub"
    sub.mkdir(exist_ok=True)
    (sub / "probe.c").write_text("/* probe.c: a test's scratch source. */\n"
                                 "int gc__probe_sub(void);\nint gc__probe_sub(void) { return 1; }\n")
    id2, _ = build_ctl(scratch)
    assert id2 != id1
    assert (scratch / "b" / "obj" / "compiler" / "probe_sub" / "probe.o").exists(), \
        "a .c file in a compiler/ sub-folder was not compiled into the library"
