"""The golden pass dumps (tests/python/golden.py): for each graph, the
state after every pass must equal the checked-in file under
tests/data/golden/. A difference is either a regression or an intended
change: then run `make golden` and commit the new files with the change, so
that the review sees what every pass now makes of these graphs.

No daemon is needed.
"""

import difflib
import os

import pytest

import golden

pytestmark = pytest.mark.skipif(
    not os.access(golden.CTL, os.X_OK), reason="compilectl not built"
)


@pytest.mark.parametrize("name", golden.GRAPHS)
def test_golden_dump(name):
    path = golden.expected_path(name)
    assert os.path.exists(path), f"{path} is missing: run `make golden`"
    with open(path) as f:
        want = f.read()
    got = golden.dump(name)
    if got != want:
        diff = "".join(difflib.unified_diff(
            want.splitlines(True), got.splitlines(True),
            fromfile=path, tofile="now", n=2))
        pytest.fail(f"the pass dumps of {name} changed (run `make golden` if "
                    f"intended, and review the diff):\n{diff[:6000]}")

