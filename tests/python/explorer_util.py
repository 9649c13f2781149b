"""A daemon with the compile explorer and a few programs compiled, for the
explorer's tests: tests/python/test_explorer.py (the JSON API) and the
browser tests (tests/browser/, which run this file as a script: it prints
what it made as one JSON line, then serves until its stdin closes).

The programs:
  mlp          tests/data/graphs/mlp.pb, as shipped
  transformer  tests/data/graphs/transformer_encoder_layer.pb (an arena
               of several buffers, for the memory plan)
  batch2/4     one small model captured twice (compiled.capture), with a
               batch of 2 then of 4: the second misses, and its miss is
               explained by the first (input x, dimension 0)
  evil         mlp.pb with script injected into every string a client
               sends that the explorer shows: a value's name, a node's
               stack trace (file, function and code) and module path, a
               parameter's path, the client id, the producer
"""

import json
import os
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))

from daemon_util import Daemon, compile_request, free_port, load_graph  # noqa: E402

TOKENS = {
    "read": "read-token-0123456789abcdef",
    "compile": "compile-token-0123456789ab",
    "admin": "admin-token-0123456789abcde",
}

# Each sets window.__xss (or loads a missing image) if it ever runs.
EVIL = {
    "name": '<img src=x onerror="window.__xss=1">',
    "file": '<script>window.__xss=2</script>.py',
    "function": '<svg onload="window.__xss=3">',
    "code": '"><script>window.__xss=4</script>',
    "module": "</code><img src=y onerror=\"window.__xss=5\">",
    "target": "<iframe src=\"javascript:window.__xss=6\"></iframe>",
    "client": "<script>window.__xss=7</script>",
    "producer": "<body onload=\"window.__xss=8\">",
}


def tokens_file(folder):
    path = os.path.join(folder, "tokens")
    with open(path, "w") as f:
        for role, tok in TOKENS.items():
            f.write("%s %s %s-user\n" % (role, tok, role))
    os.chmod(path, 0o600)
    return path


def rename_value(msg, old, new):
    """Renames value `old` to `new` everywhere in a GraphModule (its side
    table and every reference)."""
    for field, value in msg.ListFields():
        if field.message_type is None:
            continue
        items = [value] if hasattr(value, "ListFields") else value
        for item in items:
            if item.DESCRIPTOR.name in ("TensorArgument", "TensorValue") and item.name == old:
                item.name = new
            rename_value(item, old, new)


def evil_graph():
    gm = load_graph("mlp")
    g = gm.graph
    relu = next(n for n in g.nodes if n.target.startswith("aten::relu"))
    rename_value(gm, relu.outputs[0].as_tensor.name, EVIL["name"])
    trace = ('  File "%s", line 7, in %s\n    %s\n' % (EVIL["file"], EVIL["function"], EVIL["code"]))
    for n in g.nodes:
        n.metadata.stack_trace = trace
        n.metadata.module_path = EVIL["module"]
    for spec in g.inputs:
        if spec.target:
            spec.target = EVIL["target"]
            break
    gm.producer = EVIL["producer"]
    gm.torch_version = gm.torch_version + "+evil"  # a key of its own
    return gm


def captured(batch):
    """A small model captured with a batch of `batch` rows."""
    import torch
    import compiled

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(8, 16)

        def forward(self, x):
            h = torch.relu(self.fc(x))  # explorer_util.py: the user's line
            return h * 2.0 + 1.0

    torch.manual_seed(0)
    return compiled.capture(Block().eval(), (torch.randn(batch, 8),))


def start(folder, *extra):
    """Starts a daemon with tokens and the explorer in `folder`."""
    os.makedirs(folder, exist_ok=True)
    port = free_port()
    d = Daemon(folder, "--metrics-listen", "127.0.0.1:%d" % port, "--tokens",
               tokens_file(folder), *extra)
    d.start()
    d.http = "http://127.0.0.1:%d" % port
    return d


def compile_all(d, with_torch=True):
    """Compiles the programs; returns their keys by name."""
    md = (("authorization", "Bearer " + TOKENS["compile"]),)
    stub = d.stub()
    keys = {}
    graphs = [("mlp", load_graph("mlp"), "explorer-tests"), ("evil", evil_graph(), EVIL["client"]),
              ("transformer", load_graph("transformer_encoder_layer"), "explorer-tests")]
    if with_torch:
        graphs += [("batch2", captured(2), "explorer-tests"), ("batch4", captured(4), "explorer-tests")]
    for name, gm, client in graphs:
        _, result = _compile(stub, gm, client, md)
        keys[name] = result.key
    # a hit, so that the requests page shows one
    _compile(stub, load_graph("mlp"), "explorer-tests", md)
    return keys


def _compile(stub, gm, client, md):
    events = list(stub.Compile(compile_request(gm, client=client), timeout=120, metadata=md))
    assert events and events[-1].WhichOneof("event") == "result", events[-1:]
    return events, events[-1].result


def get(d, path, token="read", headers=None):
    """(status, headers, body as JSON or text) of GET path."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + TOKENS[token]
    req = urllib.request.Request(d.http + path, headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, hdrs, body = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, body = e.code, e.headers, e.read()
    ctype = hdrs.get("Content-Type", "")
    return status, hdrs, json.loads(body) if ctype.startswith("application/json") else body.decode()


def main():
    folder = sys.argv[1]
    d = start(folder)
    try:
        keys = compile_all(d, with_torch="--no-torch" not in sys.argv)
        print(json.dumps({"http": d.http, "tokens": TOKENS, "keys": keys, "evil": EVIL}), flush=True)
        sys.stdin.read()  # until the test closes it
    finally:
        d.stop()


if __name__ == "__main__":
    main()
