"""torch.export programs (.pt2) and packages, end to end.

Real modules (tests/python/pt2_util.py) are exported with torch.export in
the test, read by compilectl's C reader (client/lib/pt2.c), compiled by a
real daemon into packages (`compilectl package`), and run with
compiled.load_package in processes that have no daemon to reach, no C
compiler on their PATH and never import grpc. Outputs and the buffers the
programs write are compared with eager's. Malformed archives and corrupt
packages must each fail with a message naming what is wrong.
"""

import io
import json
import os
import struct
import subprocess
import sys
import zipfile

import pytest
import torch

import compiled
from compiled import package as pkg
from daemon_util import BUILD, Daemon

import pt2_util

CTL = os.path.join(BUILD, "bin", "compilectl")
HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = pytest.mark.skipif(not os.path.exists(CTL), reason="compilectl not built")

CASES = [("mlp", False), ("cnn_training", False), ("counter", False),
         ("mlp_dynamic", False), ("resnet_block", False), ("encoder", False),
         ("counter", True),
         ("cnn_training", True), ("mlp_dynamic", True)]

# CompositeImplicitAutograd operators that torch.export's default program
# keeps (run_decompositions() would rewrite them) and the daemon lowers
COMPOSITE = {"aten::conv2d", "aten::batch_norm", "aten::max_pool2d",
             "aten::adaptive_avg_pool2d", "aten::dropout", "aten::linear",
             "aten::layer_norm", "aten::scaled_dot_product_attention"}


def case_id(case):
    return case[0] + ("_decomposed" if case[1] else "")


def ctl(*args, timeout=300):
    env = dict(os.environ)
    env.pop("COMPILED_SERVER", None)
    return subprocess.run([CTL, *args], capture_output=True, text=True, timeout=timeout,
                          env=env)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """{case id: .pt2 path} for every case."""
    d = tmp_path_factory.mktemp("pt2")
    out = {}
    for name, decompose in CASES:
        path = d / (case_id((name, decompose)) + ".pt2")
        pt2_util.export(pt2_util.MAKERS[name], path, decompose=decompose)
        out[case_id((name, decompose))] = str(path)
    return out


@pytest.fixture(scope="module")
def packages(exported, tmp_path_factory):
    """{case id: .cpkg path}, compiled by a daemon that is stopped before
    any test loads them."""
    d = tmp_path_factory.mktemp("cpkg")
    daemon = Daemon(str(d)).start()
    try:
        out = {}
        for cid, path in exported.items():
            target = str(d / (cid + ".cpkg"))
            r = ctl("--server", daemon.address, "package", path, "-o", target)
            assert r.returncode == 0, r.stderr
            out[cid] = target
    finally:
        daemon.stop()
    return out


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_reader_converts_exported_programs(exported, case):
    """Each archive converts to a graph the validator accepts; parameters,
    buffers and the constant keep their kinds and module paths; a dynamic
    batch dimension stays a symbol."""
    path = exported[case_id(case)]
    r = ctl("graph", "validate", path)
    assert r.returncode == 0 and ": ok (" in r.stdout, r.stdout + r.stderr
    text = ctl("graph", "fmt", path).stdout
    if case[0] == "mlp_dynamic":
        assert "%x: float32[(s" in text, text
    if case[0] == "counter":
        assert "(buffer steps)" in text and "(constant scale)" in text, text
    if case[0] == "cnn_training":
        assert "(buffer bn.running_mean)" in text, text


RUN = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import torch, compiled, pt2_util
case, decompose, package = sys.argv[2], sys.argv[3] == "1", sys.argv[4]
module, args, _ = pt2_util.MAKERS[case]()
loaded = compiled.load_package(package)
report = {"grpc": "grpc" in sys.modules, "runs": loaded.program.summary.get("runs"),
          "native": loaded.program.native, "diffs": [], "state": []}
sizes = [args]
if case == "mlp_dynamic":
    sizes += [(torch.randn(n, 16),) for n in (2, 17, 64)]
with torch.no_grad():
    for call_args in sizes + [args]:
        want = module(*call_args)
        got = loaded(*call_args)
        want = want if isinstance(want, tuple) else (want,)
        got = got if isinstance(got, tuple) else (got,)
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        report["diffs"].append(max(float((a - b).abs().max()) for a, b in zip(want, got)))
for name, value in list(module.named_buffers()):
    report["state"].append((name, float((loaded.state[name].float() - value.float()).abs().max())))
report["grpc_after"] = "grpc" in sys.modules
print(json.dumps(report))
"""


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_package_runs_without_daemon_compiler_or_tracing(packages, case, tmp_path):
    """A fresh process with no daemon (the daemon that compiled the package
    is stopped; COMPILED_SERVER points nowhere), no C compiler on PATH and
    no grpc loaded runs the package: every output and every buffer the
    program writes (batch norm's statistics, the counter) match eager's
    over repeated calls, at every batch size of a dynamic dimension."""
    env = dict(os.environ, PATH="/nonexistent", COMPILED_SERVER="127.0.0.1:1",
               COMPILED_PREFETCH="0")
    r = subprocess.run([sys.executable, "-c", RUN, HERE, case[0], "1" if case[1] else "0",
                        packages[case_id(case)]], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert not report["grpc_after"], "loading a package imported the gRPC client"
    assert report["native"], report
    assert all(d <= 1e-4 for d in report["diffs"]), report
    assert report["state"] or case[0] in ("mlp", "mlp_dynamic", "encoder")
    assert all(d <= 1e-5 for _, d in report["state"]), report


@pytest.mark.parametrize("name", ["resnet_block", "cnn_training", "mlp", "encoder"])
def test_default_export_has_no_composite_fallbacks(packages, name):
    """torch.export's default program (no run_decompositions()) keeps
    conv2d, batch_norm (eval, and training with its running statistics
    written), max_pool2d, adaptive_avg_pool2d, dropout, linear, layer_norm
    and scaled_dot_product_attention: none of them is left a fallback ATen
    call, and the results
    (and the statistics a training batch norm writes) match eager's."""
    import copy
    module, args, _ = pt2_util.MAKERS[name]()
    before = copy.deepcopy(module)
    loaded = compiled.load_package(packages[name])
    summary = loaded.program.summary
    left = sorted({op for op in summary["fallback_ops"] if op.split(".")[0] in COMPOSITE})
    assert not left, summary
    if name != "encoder":  # its contiguous() stays an ATen call
        assert summary["fallback"] == 0, summary
    with torch.no_grad():
        for _ in range(2):
            want, got = module(*args), loaded(*args)
            assert (want - got).abs().max() <= 1e-4, (want, got)
    for key, value in module.state_dict().items():
        if key in loaded.state:
            assert (loaded.state[key].float() - value.float()).abs().max() <= 1e-5, key
    if name == "cnn_training":  # the statistics compared above moved
        assert "bn.running_mean" in loaded.state
        assert not torch.equal(before.bn.running_mean, module.bn.running_mean)


def test_dynamic_range_is_enforced(packages):
    """One package serves every size in the exported range; sizes outside
    it are refused with the range named, as torch.export's module does."""
    loaded = compiled.load_package(packages["mlp_dynamic"])
    module = pt2_util.mlp_dynamic()[0]
    for n in (2, 9, 64):
        x = torch.randn(n, 16)
        with torch.no_grad():
            assert torch.allclose(loaded(x), module(x), atol=1e-5)
    for n in (1, 65):
        with pytest.raises(ValueError, match=rf"dimension 0 is {n}, outside the range of .*\[2, 64\]"):
            loaded(torch.randn(n, 16))


# ---- malformed archives ----

def rewrite(src, dst, drop=(), replace=None):
    """Copies the zip `src` to `dst` without the members whose name ends
    with one of `drop`, and with replace(name, data) -> data applied."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            if any(info.filename.endswith(d) for d in drop):
                continue
            data = zin.read(info.filename)
            if replace:
                data = replace(info.filename, data)
            zout.writestr(info, data)
    return str(dst)


def edit_model(fn):
    def replace(name, data):
        if name.endswith("models/model.json"):
            doc = json.loads(data)
            fn(doc)
            return json.dumps(doc).encode()
        return data
    return replace


def unsupported_target(doc):
    doc["graph_module"]["graph"]["nodes"][0]["target"] = "_operator.mul"


def wrong_version(doc):
    doc["schema_version"] = {"major": 9, "minor": 0}


def bad_expr(doc):
    tv = doc["graph_module"]["graph"]["tensor_values"]["x"]
    tv["sizes"][0] = {"as_expr": {"expr_str": "Rational(1, 2)", "hint": {"as_int": 4}}}


MALFORMED = {
    "truncated": (lambda src, dst: (open(dst, "wb").write(open(src, "rb").read()[:600]), dst)[1],
                  "not a readable zip archive"),
    "not_zip": (lambda src, dst: (open(dst, "wb").write(b"PK\3\4" + b"\0" * 100), dst)[1],
                "not a readable zip archive"),
    "missing_model": (lambda src, dst: rewrite(src, dst, drop=["models/model.json"]),
                      "models/model.json: missing from the archive"),
    "missing_format": (lambda src, dst: rewrite(src, dst, drop=["archive_format"]),
                       "archive_format: missing from the archive"),
    "missing_weight": (lambda src, dst: rewrite(src, dst, drop=["data/weights/weight_0"]),
                       "data/weights/model_weights_config.json: config['fc1.weight']: "
                       "its data"),
    "bad_json": (lambda src, dst: rewrite(
        src, dst, replace=lambda n, d: d[:-7] if n.endswith("model.json") else d),
        "models/model.json: not valid JSON"),
    "wrong_version": (lambda src, dst: rewrite(src, dst, replace=edit_model(wrong_version)),
                      "models/model.json: schema_version: version 9.0 is not supported "
                      "(this reader reads 8.x"),
    "unsupported_target": (lambda src, dst: rewrite(src, dst,
                                                    replace=edit_model(unsupported_target)),
                           "models/model.json: graph_module.graph.nodes[0]: target "
                           "'_operator.mul' is not an operator"),
    "bad_expression": (lambda src, dst: rewrite(src, dst, replace=edit_model(bad_expr)),
                       "graph_module.graph.tensor_values['x'].sizes[0].as_expr.expr_str: "
                       "symbolic expression \"Rational(1, 2)\": at offset 0: the sympy "
                       "function 'Rational' is not supported"),
    "short_weight": (lambda src, dst: rewrite(
        src, dst, replace=lambda n, d: d[:8] if n.endswith("weights/weight_0") else d),
        "data/weights/weight_0: holds 8 bytes; the tensor 'fc1.weight' needs 2048"),
}


@pytest.mark.parametrize("kind", sorted(MALFORMED))
def test_malformed_archive_is_a_clear_error(exported, tmp_path, kind):
    make, message = MALFORMED[kind]
    src = exported["mlp_dynamic"]
    bad = make(src, str(tmp_path / (kind + ".pt2")))
    r = ctl("graph", "validate", bad)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert message in r.stderr, r.stderr
    assert "Sanitizer" not in r.stderr


def test_corrupt_member_data_is_detected(exported, tmp_path):
    """A flipped byte inside a stored member fails its CRC."""
    src = exported["mlp"]
    raw = bytearray(open(src, "rb").read())
    with zipfile.ZipFile(src) as z:
        info = z.getinfo([n for n in z.namelist() if n.endswith("weights/weight_0")][0])
    # the local header is 30 bytes plus the name and extra field
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    raw[info.header_offset + 30 + name_len + extra_len + 5] ^= 0x40
    bad = tmp_path / "crc.pt2"
    bad.write_bytes(bytes(raw))
    r = ctl("graph", "validate", str(bad))
    assert r.returncode == 1 and "data/weights/weight_0: truncated or corrupt" in r.stderr, \
        r.stderr


# ---- corrupt and mismatched packages ----

def repack(src, dst, edit_header=None, flip=None, fix_digest=True):
    raw = bytearray(open(src, "rb").read())
    if edit_header:
        hlen = struct.unpack_from("<Q", raw, 16)[0]
        header = json.loads(bytes(raw[24:24 + hlen]))
        edit_header(header)
        text = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        start = (24 + hlen + 63) // 64 * 64
        data = raw[start:-32]
        new_start = (24 + len(text) + 63) // 64 * 64
        raw = bytearray(raw[:16]) + struct.pack("<Q", len(text)) + text + \
            b"\0" * (new_start - 24 - len(text)) + data + b"\0" * 32
    if flip is not None:
        raw[flip] ^= 1
    if fix_digest:
        import hashlib
        raw[-32:] = hashlib.sha256(bytes(raw[:-32])).digest()
    dst.write_bytes(bytes(raw))
    return str(dst)


def test_corrupt_package_is_refused(packages, tmp_path):
    src = packages["mlp"]
    size = os.path.getsize(src)
    cases = [
        (repack(src, tmp_path / "a.cpkg", flip=size - 100, fix_digest=False),
         "corrupt: the SHA-256 of the contents does not match"),
        (repack(src, tmp_path / "b.cpkg", flip=0), "not a compiled package"),
        (repack(src, tmp_path / "c.cpkg", flip=8), "package format 0.0 is not supported"),
        (repack(src, tmp_path / "d.cpkg",
                edit_header=lambda h: h.update(torch_version="2.12.0+cpu")),
         "made for torch 2.12.0+cpu; this process runs torch"),
        (repack(src, tmp_path / "e.cpkg",
                edit_header=lambda h: h["artifact"].update(sha256="0" * 64)),
         "the artifact's SHA-256 does not match"),
        (repack(src, tmp_path / "f.cpkg",
                edit_header=lambda h: h["tensors"][0].update(length=10 ** 9)),
         "tensors[0] (fc1.weight): offset"),
    ]
    truncated = tmp_path / "g.cpkg"
    truncated.write_bytes(open(src, "rb").read()[:40])
    cases.append((str(truncated), "corrupt"))
    for path, message in cases:
        with pytest.raises(pkg.PackageError, match=None) as e:
            compiled.load_package(path)
        assert message in str(e.value), (path, str(e.value))


def test_cpu_without_target_features_is_refused(packages, monkeypatch):
    from compiled import target
    monkeypatch.setattr(target, "cpu_features", lambda: ["sse4.2"])
    target = json.loads(open(packages["mlp"], "rb").read()[24:][:struct.unpack_from(
        "<Q", open(packages["mlp"], "rb").read(), 16)[0]])["target"]
    if target in ("x86-64", "x86-64-v2"):
        pytest.skip("packaged for a level every x86-64 CPU has")
    with pytest.raises(pkg.PackageError, match=rf"compiled for {target}, whose CPU features "
                       r".*avx2.* this CPU lacks"):
        compiled.load_package(packages["mlp"])


def test_package_target_option(exported, tmp_path):
    """--target picks the level the header records and the artifact's code
    is built for."""
    d = Daemon(str(tmp_path)).start()
    try:
        out = tmp_path / "v2.cpkg"
        r = ctl("--server", d.address, "package", exported["mlp"], "-o", str(out),
                "--target", "x86-64-v2")
        assert r.returncode == 0, r.stderr
        header, _, _, _ = pkg.read_header(str(out))
        assert header["target"] == "x86-64-v2"
        loaded = compiled.load_package(str(out))
        assert loaded.program.artifact.native_program.code.target in ("", "x86-64-v2")
        r = ctl("--server", d.address, "package", exported["mlp"], "-o", str(out),
                "--target", "pentium")
        assert r.returncode == 2 and "--target wants" in r.stderr
    finally:
        d.stop()


def test_signed_package(exported, tmp_path):
    """A daemon that signs puts the artifact's signature in the package; a
    loader given the key checks it, and refuses another key's."""
    keys = tmp_path / "keys"
    keys.write_text("k1 " + "11" * 32 + "\n")
    os.chmod(keys, 0o600)
    d = Daemon(str(tmp_path), "--signing-keys", str(keys)).start()
    try:
        out = tmp_path / "s.cpkg"
        r = ctl("--server", d.address, "package", exported["mlp"], "-o", str(out))
        assert r.returncode == 0, r.stderr
    finally:
        d.stop()
    header = pkg.read_header(str(out))[0]
    assert header["artifact"]["signature_key"] == "k1"
    compiled.load_package(str(out), trusted_keys={"k1": bytes.fromhex("11" * 32)})
    with pytest.raises(Exception, match="signature"):
        compiled.load_package(str(out), trusted_keys={"k1": bytes.fromhex("22" * 32)})
