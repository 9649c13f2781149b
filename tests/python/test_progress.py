"""A compile that takes a while is not silent: a status line on the
terminal while it runs (or one INFO log line off a terminal), and the
reason for a recompile at INFO, naming what changed."""

import logging

import torch

import compiled
import compiled.progress


# The shared daemon (conftest.py's server) without --verify-ir.
SERVER_ARGS = ()


def _fn(x):
    return torch.nn.functional.gelu(x) * 3 - x.sum()


def test_a_compile_draws_a_status_line_on_a_terminal(server, monkeypatch, capsys):
    monkeypatch.setattr(compiled.progress, "DELAY", 0.0)
    monkeypatch.setenv("COMPILED_PROGRESS", "1")    # capsys is no terminal
    compiled.compile(_fn, (torch.randn(33),), server=server)
    err = capsys.readouterr().err
    assert f"compiled: _fn on {server}: compiled in" in err, err
    # the same graph again: a hit, which shows nothing
    compiled.compile(_fn, (torch.randn(33),), server=server)
    assert capsys.readouterr().err == ""


def test_off_a_terminal_a_slow_compile_is_one_info_line(server, monkeypatch, capsys, caplog):
    monkeypatch.setattr(compiled.progress, "DELAY", 0.0)
    monkeypatch.setenv("COMPILED_PROGRESS", "0")
    with caplog.at_level(logging.INFO, logger="compiled"):
        compiled.compile(_fn, (torch.randn(35),), server=server)
    assert capsys.readouterr().err == ""
    lines = [r.getMessage() for r in caplog.records if "compiled in" in r.getMessage()]
    assert len(lines) == 1 and "_fn" in lines[0], [r.getMessage() for r in caplog.records]


def test_a_recompile_names_what_changed(server, caplog):
    f = compiled.compile(_fn, (torch.randn(4, 8),), server=server)
    with caplog.at_level(logging.INFO, logger="compiled"):
        f(torch.randn(5, 8))
        f(torch.randn(5, 8, dtype=torch.float64))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            f(torch.randn(5, 8, dtype=torch.float64))
    reasons = [r.getMessage() for r in caplog.records if "compiling again" in r.getMessage()]
    assert len(reasons) == 3, reasons
    assert "argument 0: shape (5, 8) (was (4, 8))" in reasons[0]
    assert "argument 0: dtype torch.float64 (was torch.float32)" in reasons[1]
    assert "autocast torch.bfloat16 (was None)" in reasons[2]
    assert all(len(r) < 200 for r in reasons), "a reason, not a dump"
