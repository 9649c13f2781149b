"""torch's caching precompile with the compiled backend
(compiled.precompile): a new process whose caches are warm loads Dynamo's
saved bytecode, guards and the backend's artifact instead of tracing; its
guards still refuse other shapes and dtypes (which recompile), and a
package saved by another client falls back to the full trace.

Each process is a subprocess (the package is loaded at a process's first
call); every result is compared with eager PyTorch in that process."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import daemon_util

SCRIPT = textwrap.dedent('''
    import json, sys
    import torch
    import compiled.graphmemo
    from torch._dynamo.utils import counters

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8 * 4 * 4, 5)

        def forward(self, x):
            y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
            return self.fc(torch.flatten(y, 1)).softmax(-1)

    mode, server = sys.argv[1], sys.argv[2]
    if mode == "other-client":   # as if this client's sources had changed
        compiled.graphmemo._client[:] = ["0" * 64]
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 3, 8, 8)
    out = {}
    with torch.no_grad():
        fast = torch.compile(model, backend="compiled", options={"server": server})
        torch.testing.assert_close(fast(x), model(x))
        out["first"] = {"hits": counters["dynamo_cache"]["dynamo_cache_hit"],
                        "graphs": counters["stats"]["unique_graphs"]}
        if mode == "save":
            torch.compiler.save_cache_artifacts()
        if mode == "other-inputs":
            x3 = torch.randn(3, 3, 8, 8)
            torch.testing.assert_close(fast(x3), model(x3))
            out["shape"] = counters["stats"]["unique_graphs"]
            model.double()
            torch.testing.assert_close(fast(x.double()), model(x.double()))
            out["dtype"] = counters["stats"]["unique_graphs"]
    print(json.dumps(out))
''')


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("precompile")).start()
    yield d.address
    d.stop()


@pytest.fixture
def run(tmp_path, server):
    """Runs the script in a new process with torch's caching precompile on,
    this test's Inductor cache (the package's home) and code cache (the
    graph memo's)."""
    script = tmp_path / "model.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, TORCH_CACHING_PRECOMPILE="1",
               TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               COMPILED_CODE_CACHE=str(tmp_path / "code"))

    def run(mode):
        p = subprocess.run([sys.executable, str(script), mode, server], env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        return json.loads(p.stdout.strip().splitlines()[-1])
    return run


def test_a_warm_process_loads_the_package_instead_of_tracing(run, tmp_path):
    assert run("save")["first"] == {"hits": 0, "graphs": 1}
    assert (tmp_path / "inductor" / "dynamo").is_dir()
    # no trace: Dynamo compiled no graph, the package was hit
    assert run("load")["first"] == {"hits": 1, "graphs": 0}


def test_the_loaded_guards_refuse_other_shapes_and_dtypes(run):
    run("save")
    out = run("other-inputs")
    assert out["first"] == {"hits": 1, "graphs": 0}
    assert out["shape"] == 1   # batch 3: Dynamo traced and the backend compiled
    assert out["dtype"] == 2   # float64 weights and input: again


def test_a_package_of_another_client_falls_back_to_the_trace(run):
    run("save")
    assert run("other-client")["first"] == {"hits": 1, "graphs": 1}
