"""compiled: the Python client of the compiled graph compilation daemon.

Today the package holds graph capture: it turns a PyTorch function or
``nn.Module`` into a ``compiled.v1.GraphModule`` protobuf message (see
``proto/compiled/v1/graph.proto`` and ``docs/graph-format.md``), the unit the daemon
hashes and compiles. The gRPC client and the artifact runtime will live here
too; capture never depends on them (nor on grpc).

Public API:

- :func:`capture` -- trace a callable at the ATen level into a GraphModule.
- :func:`trace` -- the same, also returning the values of lifted tensor
  constants and the FX graph (what a runtime needs besides the message).
- :func:`export_graph` -- capture and write ``.pb`` (binary) or ``.json``.
- :class:`CaptureError` -- raised when a program cannot be captured or encoded.
"""

__version__ = "0.1.0"


class CaptureError(Exception):
    """A program could not be captured, or a value could not be encoded.

    The message names the FX node and the schema argument concerned when
    there is one, e.g. ``node 'mul' (aten::mul.Tensor), argument 'other':
    cannot encode a complex scalar``.
    """


# The generated protobuf modules live in compiled.v1 (made by `make`, from
# proto/compiled/v1/*.proto). Their proto path is unique on purpose: torch
# registers an unrelated "graph.proto" in protobuf's shared descriptor pool.
try:
    from .v1 import graph_pb2  # noqa: E402,F401
except ImportError as e:  # generated code missing
    raise ImportError(
        "compiled: cannot load the generated module compiled.v1.graph_pb2 "
        f"({e}); run `make` (or `make py-proto`) in the repository first."
    ) from e

# Imported after CaptureError and __version__ on purpose: capture.py uses both.
# Note: this rebinds the name ``compiled.capture`` from the submodule to the
# function; reach the module itself through ``sys.modules["compiled.capture"]``.
from .capture import Captured, capture, export_graph, trace  # noqa: E402

__all__ = [
    "CaptureError",
    "Captured",
    "__version__",
    "capture",
    "export_graph",
    "trace",
]
