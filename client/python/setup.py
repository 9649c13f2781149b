"""Build hook of the compiled client: the protobuf and gRPC modules
(compiled/v1/*_pb2*.py) are generated from the repository's proto/ folder
before the package is built (gen_proto.py), with the protoc that
grpcio-tools bundles, so they match the protobuf runtime installed with
the package. Everything else is in pyproject.toml."""

import sys
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gen_proto  # noqa: E402


class BuildPy(build_py):
    def run(self):
        gen_proto.generate()
        super().run()


# Before setup(): setuptools checks that compiled/v1 exists when it reads the
# package list, which a fresh checkout has not generated yet.
gen_proto.generate()
setup(cmdclass={"build_py": BuildPy})
