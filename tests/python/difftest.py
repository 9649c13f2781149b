#!/usr/bin/python3
"""Differential testing: PyTorch's OpInfo samples, compiled vs eager.

For each operator of PyTorch's own OpInfo database
(``torch.testing._internal.common_methods_invocations.op_db``) that supports
float32 on the CPU, this runs its sample inputs through
``compiled.compile`` (a real daemon, ``--verify-ir``) and eagerly, under
``torch.no_grad``, and compares every output (dtype, shape, values with
``equal_nan``), which outputs share storage with inputs and with each
other, and every input afterwards. Each operator gets one status:

- ``native``: every sample compiled, ran native code with no fallback node,
  and matched eager;
- ``partial``: matched eager, but some nodes fell back to ATen calls (listed
  from ``summary()['fallback_ops']``), or no native code was generated;
- ``wrong``: a mismatch with eager -- a bug in the compiler;
- ``capture-fail``: the client could not capture the call (not the
  compiler's fault: data-dependent output, non-tensor output, ...);
- ``error``: the daemon refused the graph, the program raised, or the
  process crashed;
- ``skip``: no usable sample (eager raises on it, or it is random: two
  eager runs disagree).

Samples of one operator are batched into one compiled function (the C
compiler runs once per compile); when the batch is not clean, each sample is
compiled alone to find which one is at fault.

Running it::

    make test-opinfo                       # everything, a table and totals
    tests/python/difftest.py --ops add,mul -v
    tests/python/difftest.py --server 127.0.0.1:7421 --max-samples 2

Native code runs in this process, so a crash in generated code would end
the run: the parent process runs the operators in a child process, records
the operator a crashed child was on as ``error`` (crash) and starts a new
child after it. ``tests/python/test_opinfo_short.py`` runs a fixed subset
in the regular suite.
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import warnings

# What is under test is native code against eager: the runtime must not
# swap in the ATen program because it timed faster on a tiny graph
# (compiled.choice), as it may by default; the suite's conftest does the same.
os.environ.setdefault("COMPILED_CHOOSE", "0")

HERE = os.path.dirname(os.path.abspath(__file__))

import torch  # noqa: E402
import torch.utils._pytree as pytree  # noqa: E402

import compiled  # noqa: E402
from native_util import clone_inputs, without_code  # noqa: E402

STATUSES = ["native", "partial", "wrong", "capture-fail", "error", "skip"]
# Worst first: an operator's status is the worst of its samples'.
_RANK = {"wrong": 0, "error": 1, "partial": 2, "native": 3, "capture-fail": 4, "skip": 5}

# The tolerances a mismatch is judged with: assert_close's float32 defaults
# first; a sample that only passes with LOOSE is reported as "imprecise"
# (it still counts as matching: generated code sums in another order and
# uses SLEEF's 1-ULP functions).
LOOSE = dict(rtol=1e-4, atol=1e-4)


def load_op_db():
    """op_db, importable without expecttest (see stubs/expecttest.py).
    common_utils parses sys.argv at import: it sees no arguments."""
    stubs = os.path.join(HERE, "stubs")
    if stubs not in sys.path:
        sys.path.append(stubs)
    saved = sys.argv
    sys.argv = saved[:1]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.testing._internal.common_methods_invocations import op_db
    finally:
        sys.argv = saved
    return op_db


def op_name(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def float32_ops(op_db):
    out = []
    for op in op_db:
        try:
            ok = op.supports_dtype(torch.float32, "cpu")
        except Exception:
            ok = False
        if ok:
            out.append(op)
    return out


class Sample:
    """One OpInfo sample as a function of its tensors: ``call(*tensors)``
    runs the operator with the sample's other arguments fixed."""

    def __init__(self, op, sample, index):
        self.index = index
        self.op = op
        leaves, self.spec = pytree.tree_flatten((sample.input, tuple(sample.args),
                                                 dict(sample.kwargs)))
        self.leaves = leaves
        self.positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        self.tensors = tuple(leaves[i] for i in self.positions)
        self.text = describe_sample(sample)

    def call(self, *tensors):
        leaves = list(self.leaves)
        for i, t in zip(self.positions, tensors):
            leaves[i] = t
        inp, args, kwargs = pytree.tree_unflatten(leaves, self.spec)
        return self.op.op(inp, *args, **kwargs)


def describe_value(v):
    if isinstance(v, torch.Tensor):
        s = f"Tensor{list(v.shape)} {str(v.dtype).replace('torch.', '')}"
        if v.numel() > 1 and not v.is_contiguous():
            s += f" strides={v.stride()}"
        return s
    if isinstance(v, (list, tuple)):
        inner = ", ".join(describe_value(x) for x in v)
        return f"[{inner}]" if isinstance(v, list) else f"({inner}{',' if len(v) == 1 else ''})"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}={describe_value(x)}" for k, x in v.items()) + "}"
    return repr(v)


def describe_sample(sample):
    parts = [describe_value(sample.input)] + [describe_value(a) for a in sample.args]
    parts += [f"{k}={describe_value(v)}" for k, v in sample.kwargs.items()]
    return ", ".join(parts)


def batch_fn(samples):
    """One function computing every sample: its inputs are the samples'
    tensors in order, its output a tuple with one entry per sample."""
    counts = [len(s.tensors) for s in samples]

    def fn(*flat):
        outs, at = [], 0
        for s, n in zip(samples, counts):
            outs.append(s.call(*flat[at:at + n]))
            at += n
        return tuple(outs)
    return fn


def _plain(value, notes):
    """value with tuple subclasses (torch.return_types) turned into tuples;
    notes collects the names of the types replaced."""
    if isinstance(value, tuple):
        if type(value) is not tuple:
            notes.add(f"{type(value).__module__}.{type(value).__name__}")
        return tuple(_plain(v, notes) for v in value)
    if isinstance(value, list):
        return [_plain(v, notes) for v in value]
    return value


def _compare(got, want, what, notes=None):
    """None when got matches want; else the mismatch message. Returns
    ("imprecise", msg) when only LOOSE tolerances accept it. A tuple where
    eager returns a named tuple (torch.return_types.max) is no mismatch of
    the compiler's: notes gets the type's name."""
    from native_util import assert_same
    want_types = set()
    want = _plain(want, want_types)
    got_types = set()
    got = _plain(got, got_types)
    if notes is not None and want_types != got_types:
        notes.update(f"returns a tuple where eager returns {t}" for t in want_types - got_types)
    try:
        assert_same(got, want, what, strides=False)
        return None
    except AssertionError as e:
        strict = str(e)
    try:
        assert_same(got, want, what, strides=False, **LOOSE)
        return ("imprecise", strict)
    except AssertionError as e:
        return ("wrong", str(e))
    except Exception as e:  # e.g. assert_close on unsupported output types
        return ("wrong", f"{what}: cannot compare: {type(e).__name__}: {e}")


def _sharing(outputs, inputs):
    """Per tensor output: the inputs and earlier outputs whose storage it
    shares, as ("in", i) / ("out", j) pairs (eager's views share)."""
    outs = [t for t in pytree.tree_flatten(outputs)[0] if isinstance(t, torch.Tensor)]
    ins = [t for t in pytree.tree_flatten(list(inputs))[0] if isinstance(t, torch.Tensor)]

    def ptr(t):
        try:
            return t.storage().data_ptr() if t.numel() and t.layout == torch.strided else None
        except Exception:
            return None
    op, ip = [ptr(t) for t in outs], [ptr(t) for t in ins]
    return [() if p is None else
            tuple([("in", i) for i, q in enumerate(ip) if q == p] +
                  [("out", j) for j in range(k) if op[j] == p])
            for k, p in enumerate(op)]


def _same_eager(a, b):
    try:
        from native_util import assert_same
        assert_same(a, b, "eager", strides=False)
        return True
    except Exception:
        return False


def usable_samples(op, max_samples):
    """The op's float32 CPU samples whose eager run works and is
    deterministic, as Sample objects; and the reasons others were skipped."""
    if "empty" in op.name:
        return [], ["uninitialized output (empty)"]
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        # Seeds the generator inside the call: deterministic eagerly, but
        # the seeding is a side effect capture does not record.
        return [], ["random operator (wrapper_set_seed)"]
    torch.manual_seed(0)
    out, skipped = [], []
    try:
        gen = op.sample_inputs("cpu", torch.float32, requires_grad=False)
        raw = []
        for s in gen:
            raw.append(s)
            if len(raw) >= max_samples:
                break
    except Exception as e:
        return [], [f"sample_inputs raised {type(e).__name__}: {e}"]
    for i, s in enumerate(raw):
        try:
            smp = Sample(op, s, i)
            with torch.no_grad():
                torch.manual_seed(1)
                a = smp.call(*clone_inputs(smp.tensors))
                torch.manual_seed(2)
                b = smp.call(*clone_inputs(smp.tensors))
        except Exception as e:
            skipped.append(f"sample {i}: eager raises {type(e).__name__}")
            continue
        if not _same_eager(a, b):
            skipped.append(f"sample {i}: random (two eager runs disagree)")
            continue
        out.append(smp)
    return out, skipped


def run_batch(samples, server):
    """Compiles and runs samples together. Returns a dict: status,
    per-sample mismatches, summary, detail."""
    fn = batch_fn(samples)
    flat = tuple(t for s in samples for t in s.tensors)
    res = {"status": None, "detail": "", "summary": {}, "mismatch": {}, "imprecise": {},
           "notes": set()}
    with torch.no_grad():
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cf = compiled.compile(fn, clone_inputs(flat), server=server)
        except compiled.CaptureError as e:
            res.update(status="capture-fail", detail=_one_line(e))
            return res
        except compiled.CompileError as e:
            res.update(status="error", detail="daemon refused: " + _one_line(e))
            return res
        except Exception as e:
            res.update(status="error", detail=f"compile: {type(e).__name__}: {_one_line(e)}")
            return res
        eager_args = clone_inputs(flat)
        comp_args = clone_inputs(flat)
        want = fn(*eager_args)
        try:
            got = cf(*comp_args)
        except compiled.CaptureError as e:  # a re-capture at call time
            res.update(status="capture-fail", detail=_one_line(e))
            return res
        except Exception as e:
            res.update(status="error", detail=f"run: {type(e).__name__}: {_one_line(e)}")
            return res
    if not cf.programs:
        res.update(status="error", detail="no program was loaded (daemon unavailable?)")
        return res
    summary = cf.summary()
    res["summary"] = summary
    at = 0
    for k, s in enumerate(samples):
        n = len(s.tensors)
        bad = _compare(got[k], want[k], "output", res["notes"])
        if bad is None:
            bad = _compare(comp_args[at:at + n], eager_args[at:at + n], "input after the call")
        if bad is None:
            sg = _sharing(got[k], comp_args[at:at + n])
            sw = _sharing(want[k], eager_args[at:at + n])
            if sg != sw:
                bad = ("wrong", f"outputs share storage with inputs/outputs {sg}, eager's {sw}")
        at += n
        if bad is not None:
            kind, msg = bad
            res["imprecise" if kind == "imprecise" else "mismatch"][s.index] = msg
    if res["mismatch"]:
        res["status"] = "wrong"
        res["detail"] = "; ".join(_one_line(m) for m in res["mismatch"].values())
    elif summary.get("runs") != "native" and not without_code(summary):
        reason = str(cf.programs[-1].native_reason)
        # No native code because nothing was lowered is a gap; because the
        # C compiler or the native build failed, a bug.
        res["status"] = "error" if ("failed" in reason or "cc:" in reason) else "partial"
        res["detail"] = "no native code: " + reason
    elif summary.get("fallback", 0) > 0:
        res["status"] = "partial"
        counts = collections.Counter(summary.get("fallback_ops", []))
        res["detail"] = "fallback: " + ", ".join(
            f"{k}" + (f" x{n}" if n > 1 else "") for k, n in counts.items())
    else:
        res["status"] = "native"
    return res


def _one_line(e, limit=400):
    s = " ".join(str(e).split())
    return s if len(s) <= limit else s[:limit] + "..."


def fallback_names(summary):
    if summary.get("runs") != "native" and not without_code(summary):
        return ["<no native code>"]
    return list(summary.get("fallback_ops", []))


def run_op(op, server, *, max_samples=6):
    """Runs one OpInfo operator; returns a JSON-able dict: name, status,
    samples, fallback ops, details (for wrong: sample and mismatch)."""
    name = op_name(op)
    t0 = time.time()
    samples, skipped = usable_samples(op, max_samples)
    result = {"op": name, "status": "skip", "samples": len(samples), "fallback_ops": [],
              "detail": "; ".join(skipped[:3]) or "no samples", "wrong": [], "imprecise": [],
              "nodes": 0, "native": 0, "extern": 0, "fallback": 0}
    if not samples:
        result["seconds"] = round(time.time() - t0, 2)
        return result
    batch = run_batch(samples, server)
    if batch["status"] in ("native", "partial") or len(samples) == 1:
        per_sample = [(samples, batch)]
    else:  # find the samples at fault
        per_sample = [([s], run_batch([s], server)) for s in samples]
    statuses, details, fallbacks, notes = [], [], [], set()
    for group, r in per_sample:
        statuses.append(r["status"])
        notes |= r["notes"]
        if r["status"] != "native" and r["detail"]:
            details.append(("" if len(group) > 1 else f"sample {group[0].index}: ") + r["detail"])
        s = r["summary"]
        if s:
            fallbacks += fallback_names(s) if r["status"] == "partial" else []
            for k in ("nodes", "native", "extern", "fallback"):
                result[k] += int(s.get(k, 0))
        for s_obj in group:
            if s_obj.index in r["mismatch"]:
                result["wrong"].append({"sample": s_obj.index, "input": s_obj.text,
                                        "mismatch": r["mismatch"][s_obj.index]})
            if s_obj.index in r["imprecise"]:
                result["imprecise"].append({"sample": s_obj.index, "input": s_obj.text,
                                            "mismatch": r["imprecise"][s_obj.index]})
    good = [s for s in statuses if s != "capture-fail"]
    result["status"] = min(good or statuses, key=lambda s: _RANK[s])
    result["fallback_ops"] = sorted(set(fallbacks))
    result["notes"] = sorted(notes)
    result["detail"] = "; ".join(dict.fromkeys(details))[:600]
    result["seconds"] = round(time.time() - t0, 2)
    return result


# ---------------------------------------------------------------------------
# The script: a parent that survives crashes, a child that runs operators.
# ---------------------------------------------------------------------------

def child_main(args):
    op_db = load_op_db()
    ops = select_ops(op_db, args.ops)
    with open(args.results, "a") as out:
        for i in range(args.start, len(ops)):
            out.write(json.dumps({"start": i, "op": op_name(ops[i])}) + "\n")
            out.flush()
            try:
                r = run_op(ops[i], args.server, max_samples=args.max_samples)
            except Exception as e:
                r = {"op": op_name(ops[i]), "status": "error", "samples": 0, "fallback_ops": [],
                     "detail": "runner: " + _one_line(traceback.format_exc(limit=3)),
                     "wrong": [], "imprecise": []}
                del e
            r["index"] = i
            out.write(json.dumps(r) + "\n")
            out.flush()
            if args.verbose:
                print(f"[{i + 1}/{len(ops)}] {r['op']}: {r['status']} {r.get('detail', '')[:160]}",
                      file=sys.stderr, flush=True)


def select_ops(op_db, names):
    ops = float32_ops(op_db)
    if names:
        wanted = [n.strip() for n in names.split(",") if n.strip()]
        by_name = {op_name(o): o for o in ops}
        missing = [n for n in wanted if n not in by_name]
        if missing:
            raise SystemExit(f"difftest: no float32 OpInfo named {', '.join(missing)}")
        ops = [by_name[n] for n in wanted]
    return ops


def parent_main(args):
    daemon = None
    server = args.server
    tmp = tempfile.mkdtemp(prefix="difftest-")
    if server is None:
        import daemon_util
        extra = ["--verify-ir"]
        daemon = daemon_util.Daemon(tmp, *extra, cache_dir=args.cache_dir).start()
        server = daemon.address
    results_path = os.path.join(tmp, "results.jsonl")
    start = 0
    t0 = time.time()
    try:
        while True:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--server", server,
                   "--results", results_path, "--start", str(start),
                   "--max-samples", str(args.max_samples)]
            if args.ops:
                cmd += ["--ops", args.ops]
            if args.verbose:
                cmd.append("-v")
            rc = subprocess.call(cmd)
            if rc in (-2, 130):
                raise KeyboardInterrupt
            records = read_records(results_path)
            started = [r for r in records if "start" in r]
            done = {r["index"] for r in records if "status" in r}
            if rc == 0:
                break
            pending = [r for r in started if r["start"] not in done]
            if not pending:
                print(f"difftest: the child failed (status {rc}) outside any operator",
                      file=sys.stderr)
                return 2
            crashed = pending[-1]
            with open(results_path, "a") as f:
                f.write(json.dumps({"op": crashed["op"], "index": crashed["start"],
                                    "status": "error", "samples": 0, "fallback_ops": [],
                                    "detail": f"the process died (status {rc}) running it",
                                    "wrong": [], "imprecise": []}) + "\n")
            start = crashed["start"] + 1
            if daemon is not None and daemon.proc.poll() is not None:
                print("difftest: the daemon died; restarting it", file=sys.stderr)
                daemon.proc = None
                daemon.start()
                server = daemon.address
    finally:
        if daemon is not None:
            daemon.stop(check=False)
    results = [r for r in read_records(results_path) if "status" in r]
    report(results, time.time() - t0, sys.stdout)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    wrong = [r for r in results if r["status"] == "wrong"]
    return 1 if wrong else 0


def read_records(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def report(results, seconds, out):
    results = sorted(results, key=lambda r: r.get("index", 0))
    width = max([len(r["op"]) for r in results] + [10])
    print(f"{'operator':<{width}}  {'status':<12} smp  nodes nat ext fb  detail", file=out)
    for r in results:
        print(f"{r['op']:<{width}}  {r['status']:<12} {r.get('samples', 0):>3}  "
              f"{r.get('nodes', 0):>5} {r.get('native', 0):>3} {r.get('extern', 0):>3} "
              f"{r.get('fallback', 0):>2}  {r.get('detail', '')[:200]}", file=out)
    counts = collections.Counter(r["status"] for r in results)
    print(file=out)
    print("totals: " + ", ".join(f"{s} {counts.get(s, 0)}" for s in STATUSES)
          + f" ({len(results)} operators, {seconds:.0f} s)", file=out)
    fb = collections.Counter(name for r in results for name in r.get("fallback_ops", []))
    if fb:
        print("\nfallback operators (OpInfo operators using each):", file=out)
        for name, n in fb.most_common():
            print(f"  {n:>4}  {name}", file=out)
    notes = collections.Counter(n for r in results for n in r.get("notes", []))
    if notes:
        print("\nclient notes (values match; OpInfo operators affected):", file=out)
        for n, k in notes.most_common():
            print(f"  {k:>4}  {n}", file=out)
    _print_samples(out, "imprecise (beyond float32 defaults, within rtol=atol=1e-4)",
                   [r for r in results if r.get("imprecise")], "imprecise", 300)
    _print_samples(out, "WRONG results",
                   [r for r in results if r["status"] == "wrong"], "wrong", 600)


def _print_samples(out, title, results, field, width):
    """Each sample listed under results' `field`: the operator, the sample
    and its input, and the mismatch on one line of at most `width`."""
    if results:
        print(f"\n{title}:", file=out)
        for r in results:
            for w in r[field]:
                print(f"  {r['op']} sample {w['sample']}: {w['input']}\n"
                      f"      {_one_line(w['mismatch'], width)}", file=out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", help="a running daemon's address (default: start one)")
    p.add_argument("--cache-dir", help="the started daemon's cache (reuse between runs)")
    p.add_argument("--ops", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--max-samples", type=int, default=6, help="samples per operator (6)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--results", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child_main(args)
        return 0
    return parent_main(args)


if __name__ == "__main__":
    sys.exit(main())
