#!/usr/bin/python3
"""Writes the committed seeds of fuzz_pt2 and the .pt2 test archive.

fuzz_pt2 reads an input starting with "PK\\3\\4" as a whole .pt2 archive and
anything else as the program's JSON (models/model.json). The seeds are both
forms of the modules in tests/python/pt2_util.py (MLP, a small CNN with
batch norm in training mode, a module with an in-place buffer update and a
constant, an MLP with a dynamic batch dimension), as torch.export writes
them and after run_decompositions() (BUFFER_MUTATION outputs, core ATen).
The dynamic MLP's archive is also tests/data/pt2/mlp_dynamic.pt2, which
test_compilectl packages.

Run from the repository root after `make`:
  PYTHONPATH=client/python .venv/bin/python tests/fuzz/make_pt2_seeds.py
The seeds are committed; rerun only to change them (torch's zip writer
stamps no times, so the same torch writes the same bytes).
"""

import os
import shutil
import sys
import tempfile
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import pt2_util  # noqa: E402

CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus", "pt2")
DATA = os.path.join(ROOT, "tests", "data", "pt2")


def main():
    os.makedirs(CORPUS, exist_ok=True)
    os.makedirs(DATA, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, maker in sorted(pt2_util.MAKERS.items()):
            for decompose in (False, True):
                tag = name + ("_decomposed" if decompose else "")
                path = os.path.join(tmp, tag + ".pt2")
                pt2_util.export(maker, path, decompose=decompose)
                shutil.copy(path, os.path.join(CORPUS, tag + ".pt2"))
                with zipfile.ZipFile(path) as z:
                    model = [n for n in z.namelist() if n.endswith("models/model.json")][0]
                    with open(os.path.join(CORPUS, tag + ".json"), "wb") as f:
                        f.write(z.read(model))
                if tag == "mlp_dynamic":
                    shutil.copy(path, os.path.join(DATA, "mlp_dynamic.pt2"))


if __name__ == "__main__":
    main()
