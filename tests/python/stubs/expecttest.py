"""A stand-in for the `expecttest` package, which torch.testing._internal
imports but which Debian does not package (and PyPI is unreachable here).

Only tests/python/difftest.py puts this folder on sys.path, and only after
every other entry, so a real expecttest wins when it is installed. It
provides what importing common_methods_invocations needs: ``ACCEPT`` and a
``TestCase`` base class (no expect-file support).
"""

import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    pass
