"""The compile explorer's JSON API (docs/explorer.md) against a real daemon:
who may look, what each route returns, bounds, and that client text comes
back as the same text. The pages themselves are tested in a browser:
tests/browser/."""

import json
import os
import urllib.error
import urllib.request

import pytest

import explorer_util as xu
from daemon_util import Daemon, compile_request, load_graph


@pytest.fixture(scope="module")
def fx(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("explorer"))
    d = xu.start(os.path.join(folder, "d"))
    keys = xu.compile_all(d)
    yield d, keys
    d.stop()


def test_tokens_and_roles(fx):
    d, _ = fx
    for role in ("read", "compile", "admin"):
        status, _, body = xu.get(d, "/api/whoami", token=role)
        assert status == 200 and body["role"] == role and body["how"] == "token"
    status, hdrs, body = xu.get(d, "/api/programs", token=None)
    assert status == 401 and body["error"]["code"] == "unauthenticated"
    assert hdrs["WWW-Authenticate"].startswith("Bearer")
    status, _, _ = xu.get(d, "/api/programs", token=None,
                          headers={"Authorization": "Bearer not-a-token-0123456789"})
    assert status == 401
    # pages: to the login form; scripts and the form itself need nothing
    req = urllib.request.Request(d.http + "/explorer/programs.html")
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as e:
        opener.open(req, timeout=10)
    assert e.value.code == 303 and e.value.headers["Location"] == "/explorer/login"
    status, hdrs, _ = xu.get(d, "/explorer/common.js", token=None)
    assert status == 200 and hdrs["Content-Type"].startswith("text/javascript")
    status, _, _ = xu.get(d, "/explorer/login", token=None)
    assert status == 200
    # /metrics and /healthz stay open
    assert xu.get(d, "/healthz", token=None)[0] == 200


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kw):
        return None


def post_form(d, path, body, headers=None):
    req = urllib.request.Request(d.http + path, data=body.encode(), method="POST",
                                 headers={"Content-Type": "application/x-www-form-urlencoded",
                                          **(headers or {})})
    opener = urllib.request.build_opener(NoRedirect)
    try:
        opener.open(req, timeout=10)
    except urllib.error.HTTPError as e:
        return e.code, e.headers
    raise AssertionError("no redirect")


def test_login_sets_a_session_cookie_not_the_token(fx):
    d, _ = fx
    status, hdrs = post_form(d, "/explorer/login", "token=" + xu.TOKENS["read"])
    assert status == 303 and hdrs["Location"] == "/explorer/"
    cookie = hdrs["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert xu.TOKENS["read"] not in cookie
    value = cookie.split(";")[0]
    status, _, body = xu.get(d, "/api/whoami", token=None, headers={"Cookie": value})
    assert status == 200 and body == {"who": "read-user", "role": "read", "how": "session"}
    # a forged or altered session is refused
    name, v = value.split("=", 1)
    forged = v[:-1] + ("0" if v[-1] != "0" else "1")
    assert xu.get(d, "/api/whoami", token=None, headers={"Cookie": name + "=" + forged})[0] == 401
    # a wrong token: back to the form, no cookie
    status, hdrs = post_form(d, "/explorer/login", "token=wrong-token-0123456789")
    assert status == 303 and "failed" in hdrs["Location"] and "Set-Cookie" not in hdrs
    # a form posted from another site is refused
    status, hdrs = post_form(d, "/explorer/login", "token=" + xu.TOKENS["read"],
                             headers={"Origin": "http://evil.example"})
    assert "Set-Cookie" not in hdrs
    # log out clears it
    status, hdrs = post_form(d, "/explorer/logout", "")
    assert status == 303 and "Max-Age=0" in hdrs["Set-Cookie"]
    assert xu.TOKENS["read"] not in d.log()


def test_read_only_and_headers(fx):
    d, keys = fx
    for method in ("POST", "PUT", "DELETE"):
        req = urllib.request.Request(d.http + "/api/programs", method=method, data=b"x",
                                     headers={"Authorization": "Bearer " + xu.TOKENS["admin"]})
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(req, timeout=10)
        assert e.value.code == 405
    status, hdrs, _ = xu.get(d, "/api/programs/" + keys["mlp"])
    csp = hdrs["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert hdrs["X-Content-Type-Options"] == "nosniff"
    from compiled.v1 import compiled_pb2
    stats = d.stub().Stats(compiled_pb2.StatsRequest(), timeout=10,
                           metadata=(("authorization", "Bearer " + xu.TOKENS["read"]),))
    assert stats.compiles == 5  # looking compiled nothing


def test_programs_listing_and_bounds(fx):
    d, keys = fx
    status, _, body = xu.get(d, "/api/programs?order=compile_time&limit=2")
    assert status == 200 and body["total"] == 5 and len(body["programs"]) == 2
    times = [p["compile_ms"] for p in body["programs"]]
    assert times == sorted(times, reverse=True)
    status, _, rest = xu.get(d, "/api/programs?order=compile_time&offset=2&limit=3")
    assert {p["key"] for p in body["programs"] + rest["programs"]} == set(keys.values())
    assert xu.get(d, "/api/programs?limit=100000")[0] == 400
    assert xu.get(d, "/api/programs?order=nope")[0] == 400
    mlp = next(p for p in body["programs"] + rest["programs"] if p["key"] == keys["mlp"])
    assert mlp["kept"] and mlp["summary"]["nodes"] == 6 and mlp["summary"]["native"]["kernels"] >= 1


def test_program_summary_c_passes(fx):
    d, keys = fx
    status, _, p = xu.get(d, "/api/programs/" + keys["batch2"])
    assert status == 200
    assert p["request"]["client"] == "explorer-tests" and p["request"]["inputs"] == 3
    native = p["artifact"]["native"]
    assert native["summary"]["nodes"] > 0 and "gc_seg0" in native["c"]["text"]
    assert [x["name"] for x in p["passes"]] == ["graph", "functionalize", "lower", "schedule",
                                                "plan", "codegen", "program"]
    for x in p["passes"]:
        status, _, t = xu.get(d, x["url"] + "?limit=3")
        assert status == 200 and len(t["lines"]) <= 3 and t["total_lines"] > 0, x
    status, _, c = xu.get(d, p["links"]["c"] + "?offset=0&limit=5000")
    assert "\n".join(c["lines"]) + "\n" == native["c"]["text"]
    assert xu.get(d, "/api/programs/" + "0" * 64)[0] == 404
    assert xu.get(d, "/api/programs/xyz")[0] == 400


def test_nodes_and_kernels_link_both_ways(fx):
    d, keys = fx
    _, _, g = xu.get(d, "/api/programs/%s/graph" % keys["batch2"])
    _, _, k = xu.get(d, "/api/programs/%s/kernels" % keys["batch2"])
    by_name = {x["name"]: x for x in k["kernels"]}
    relu = next(n for n in g["nodes"] if n["target"].startswith("aten::relu"))
    assert relu["status"] == "native" and relu["location"]["file"].endswith("explorer_util.py")
    assert relu["location"]["function"] == "forward"
    assert relu["kernels"], relu
    for name in relu["kernels"]:
        assert relu["id"] in by_name[name]["nodes"]
        assert by_name[name]["line"]  # its comment in the C
    _, _, c = xu.get(d, "/api/programs/%s/c?offset=%d&limit=3" % (keys["batch2"], by_name[relu["kernels"][0]]["line"] - 1))
    assert c["lines"][0] == "/* " + relu["kernels"][0]
    assert ("graph node %d:" % relu["id"]) in "\n".join(c["lines"])
    # paging bounds
    _, _, page = xu.get(d, "/api/programs/%s/graph?offset=1&limit=1" % keys["batch2"])
    assert [n["id"] for n in page["nodes"]] == [1]
    assert xu.get(d, "/api/programs/%s/graph?limit=5000" % keys["batch2"])[0] == 400
    _, _, m = xu.get(d, "/api/programs/%s/memory" % keys["batch2"])
    assert m["kernels"] == k["total"]
    # the memory plan: buffers within the arena, live within the kernels
    _, _, m = xu.get(d, "/api/programs/%s/memory" % keys["transformer"])
    assert m["buffers"] and m["arena_bytes"] > 0
    for b in m["buffers"]:
        assert 0 <= b["offset"] and b["offset"] + b["bytes"] <= m["arena_bytes"], b
        assert 0 <= b["first"] <= b["last"] < m["kernels"], b


def test_miss_explained_by_the_changed_input(fx):
    d, keys = fx
    _, _, x = xu.get(d, "/api/programs/%s/explain" % keys["batch4"])
    assert x["nearest"]["key"] == keys["batch2"]
    assert "inputs" in x["differing"]
    assert "input 2 (x): dimension 0 is 4, the cached program's is 2" in x["summary"]
    # the same from the request ring
    _, _, reqs = xu.get(d, "/api/requests")
    r = next(r for r in reqs["requests"] if r["key"] == keys["batch4"])
    assert r["outcome"] == "compiled" and r["missed"]
    assert [s["stage"] for s in r["stages"]][:3] == ["order", "functionalize", "emit"]
    _, _, y = xu.get(d, "/api/requests/%d/explain" % r["seq"])
    assert y["summary"] == x["summary"] and y["request"]["seq"] == r["seq"]
    hit = next(r for r in reqs["requests"] if r["outcome"] == "hit")
    assert hit["key"] == keys["mlp"] and hit["who"] == "compile-user"


def test_client_strings_come_back_as_text(fx):
    d, keys = fx
    _, _, p = xu.get(d, "/api/programs/" + keys["evil"])
    assert p["request"]["client"] == xu.EVIL["client"]
    assert p["request"]["producer"] == xu.EVIL["producer"]
    _, _, g = xu.get(d, "/api/programs/%s/graph" % keys["evil"])
    n = g["nodes"][0]
    assert n["module"] == xu.EVIL["module"]
    assert n["location"] == {"file": xu.EVIL["file"], "line": 7, "function": xu.EVIL["function"]}
    _, _, t = xu.get(d, "/api/programs/%s/passes/graph" % keys["evil"])
    assert any(xu.EVIL["target"] in line for line in t["lines"])
    assert any(xu.EVIL["name"] in line for line in t["lines"])


def test_kept_requests_are_bounded(tmp_path):
    d = xu.start(str(tmp_path / "d"), "--explorer-keep-max", "1K")
    try:
        md = (("authorization", "Bearer " + xu.TOKENS["compile"]),)
        events = list(d.stub().Compile(compile_request(load_graph("mlp")), timeout=60, metadata=md))
        key = events[-1].result.key
        _, _, p = xu.get(d, "/api/programs/" + key)
        assert p["request"] is None and "not kept" in p["request_note"]
        assert p["artifact"]["native"]["c"]["text"]  # the C is the artifact's
        status, _, g = xu.get(d, "/api/programs/%s/graph" % key)
        assert status == 404 and g["error"]["code"] == "not_kept"
        status, _, c = xu.get(d, "/api/programs/%s/c" % key)
        assert status == 200 and c["lines"]
        assert "not kept" in d.log()
    finally:
        d.stop()


def test_without_tokens_loopback_only(tmp_path):
    port = xu.free_port()
    d = Daemon(str(tmp_path / "d"), "--metrics-listen", "127.0.0.1:%d" % port)
    os.makedirs(d.dir, exist_ok=True)
    d.start()
    d.http = "http://127.0.0.1:%d" % port
    try:
        status, _, body = xu.get(d, "/api/whoami", token=None)
        assert status == 200 and body["how"] == "loopback" and body["role"] == "admin"
        # a page of another site whose name points here (DNS rebinding)
        status, _, body = xu.get(d, "/api/whoami", token=None,
                                 headers={"Host": "attacker.example:%d" % port})
        assert status == 403 and "loopback" in body["error"]["message"]
        status, _, _ = xu.get(d, "/explorer/", token=None, headers={"Host": "localhost:%d" % port})
        assert status == 200
        # --explorer=0: not served
    finally:
        d.stop()
    d2 = Daemon(str(tmp_path / "d2"), "--metrics-listen", "127.0.0.1:%d" % port, "--explorer=0")
    os.makedirs(d2.dir, exist_ok=True)
    d2.start()
    d2.http = d.http
    try:
        assert xu.get(d2, "/api/whoami", token=None)[0] == 404
    finally:
        d2.stop()


def test_a_big_program_is_paged(tmp_path):
    """A 20,000-node program: every listing comes in bounded pages, and
    the derived view outlives the derivation's memory (it once kept
    pointers into the freed arena: a crash on the first page)."""
    import biggraph
    from compiled.v1 import graph_pb2
    d = xu.start(str(tmp_path / "d"))
    try:
        gm = graph_pb2.GraphModule()
        gm.ParseFromString(biggraph.chain_graph_bytes(20000))
        md = (("authorization", "Bearer " + xu.TOKENS["compile"]),)
        key = list(d.stub().Compile(compile_request(gm), timeout=300, metadata=md))[-1].result.key
        status, _, g = xu.get(d, "/api/programs/%s/graph?offset=19900&limit=1000" % key)
        assert status == 200 and g["total"] == 20000 and len(g["nodes"]) == 100
        assert g["nodes"][-1]["id"] == 19999 and g["nodes"][-1]["target"].startswith("aten::")
        status, _, g = xu.get(d, "/api/programs/%s/graph" % key)
        assert len(g["nodes"]) == 200 and g["nodes"][0]["kernels"]
        status, _, c = xu.get(d, "/api/programs/%s/c?limit=5000" % key)
        assert len(c["lines"]) == 5000 and c["total_lines"] > 5000
        _, _, p = xu.get(d, "/api/programs/" + key)
        assert len(json.dumps(p)) < 1 << 20  # the C inline is cut
    finally:
        d.stop()
