"""Generate compiled/v1/*_pb2.py and *_pb2_grpc.py from the repository's
proto/ folder with grpcio-tools' protoc (setup.py runs this at build time;
`make py-proto` runs it as a script when a .proto changes)."""

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = HERE.parent.parent / "proto"
OUT = HERE / "compiled" / "v1"


def generate() -> None:
    protos = sorted(PROTO_ROOT.glob("compiled/v1/*.proto"))
    if not protos:
        if list(OUT.glob("*_pb2.py")):
            return  # a copy of the package that carries the generated modules
        raise SystemExit(f"compiled: no .proto files under {PROTO_ROOT}: install from a "
                         "checkout of the repository (pip install ./client/python)")
    import grpc_tools
    from grpc_tools import protoc

    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    OUT.mkdir(parents=True, exist_ok=True)
    for proto in protos:
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={HERE}",
                f"--grpc_python_out={HERE}", str(proto.relative_to(PROTO_ROOT))]
        if protoc.main(args) != 0:
            raise SystemExit(f"compiled: protoc failed on {proto}")
    (OUT / "__init__.py").touch()


if __name__ == "__main__":
    generate()
    sys.exit(0)
