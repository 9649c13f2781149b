"""Random programs (tests/python/graphgen.py) compiled against eager: a
fixed set of 32 seeds in the regular suite; `make fuzz-graphs` runs
thousands."""

import pytest

import daemon_util
import graphgen

SEEDS = list(range(20261123, 20261123 + 32))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = daemon_util.Daemon(tmp_path_factory.mktemp("graphgen"), "--verify-ir").start()
    yield d.address
    d.stop()


def test_generation_is_reproducible():
    for seed in SEEDS[:5]:
        assert graphgen.generate(seed).source() == graphgen.generate(seed).source()
    sources = {graphgen.generate(s).source() for s in SEEDS}
    assert len(sources) == len(SEEDS)


def test_programs_cover_the_operator_families():
    text = "\n".join("\n".join(graphgen.generate(s).body) for s in range(200))
    for needle in ["keepdim=True", "keepdim=False", ".permute(", ".transpose(", ".expand(",
                   ".reshape(", ".unsqueeze(", "softmax(", "layer_norm(", "torch.where(",
                   ".to(torch.", "::"]:
        assert needle in text, needle


def test_random_programs_match_eager(server):
    programs = [graphgen.generate(s) for s in SEEDS]
    failures, fallbacks, stats = graphgen.check_graphs(programs, server, batch=8)
    assert not failures, "\n".join(str(f) for f in failures)
    assert stats["graphs"] == len(SEEDS)
    assert stats["native_nodes"] > 3 * len(SEEDS)
