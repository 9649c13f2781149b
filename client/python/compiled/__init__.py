"""compiled: the Python client of the compiled graph compilation daemon.

The package captures a PyTorch function or ``nn.Module`` as a
``compiled.v1.GraphModule`` protobuf message (see
``proto/compiled/v1/graph.proto`` and ``docs/graph-format.md``), the unit the
daemon hashes and compiles (:mod:`compiled.capture`); talks to the daemon
over gRPC (:mod:`compiled.client`); runs the artifacts it returns
(:mod:`compiled.runtime`); and puts the three together behind guards
(:mod:`compiled.frontend`). Capture and the runtime never depend on grpc:
the client and compile()/backend() are imported on first use.

Public API:

- :func:`compile` -- compile a function or module through the daemon; returns
  a callable with the same calling convention, guarded by its inputs'
  signature (recompiles for new shapes, dtypes, strides...).
- :func:`backend` -- the same as a TorchDynamo backend ``(gm, example_inputs)``.
- :func:`capture` -- trace a callable at the ATen level into a GraphModule.
- :func:`trace` -- the same, also returning the values of lifted tensor
  constants and the FX graph (what a runtime needs besides the message).
- :func:`export_graph` -- capture and write ``.pb`` (binary) or ``.json``.
- :class:`Client` -- a gRPC client of the daemon.
- :func:`load_program` -- turn an artifact into a Python function.
- :func:`load_package` -- load a package (``compilectl package model.pt2``):
  a torch.export program compiled ahead of time, run with no daemon.
- Errors: :class:`CaptureError`, :class:`CompileError` (the daemon refused
  the graph), :class:`DaemonUnavailable`, :class:`DaemonBusy`,
  :class:`DaemonError`, :class:`ArtifactError`, :class:`SpecializationError`,
  :class:`GuardFailure` (a program compiled for symbolic sizes does not
  apply to a call's inputs);
  :class:`DaemonUnavailableWarning` when compile() falls back to eager.
"""

__version__ = "0.1.0"


class CaptureError(Exception):
    """A program could not be captured, or a value could not be encoded.

    The message names the FX node and the schema argument concerned when
    there is one, e.g. ``node 'mul' (aten::mul.Tensor), argument 'other':
    cannot encode a complex scalar``.
    """


class UnsupportedCapture(CaptureError):
    """The program does something capture cannot represent faithfully (it
    switches grad mode inside). :func:`compile` runs such a function eagerly,
    which is exact, and warns once (:class:`CompileFallbackWarning`)."""


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
from .errors import (  # noqa: E402
    ArtifactError,
    ArtifactWarning,
    CompileError,
    CompileFallbackWarning,
    DaemonBusy,

    DaemonError,
    DaemonUnavailable,
    DaemonUnavailableWarning,
    GuardFailure,
    SpecializationError,
)
from .runtime import LoadedProgram, load as load_program  # noqa: E402

# The gRPC client, and compile()/backend() which use it, are imported on first
# use, so that capture and the runtime work without grpc installed.
_LAZY = {
    "Client": ("client", "Client"),
    "CompiledFunction": ("frontend", "CompiledFunction"),
    "backend": ("frontend", "backend"),
    "compile": ("frontend", "compile"),
    "load_package": ("package", "load_package"),
    "PackageError": ("package", "PackageError"),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        module_name, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module_name}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


def _prefetch():
    """Import compile()'s modules (grpc: ~0.1 s, most of it ssl) on a
    background thread, so a job that imports compiled and then builds its
    model finds them loaded at its first compile() instead of waiting for
    them. A fork waits until the import is done. $COMPILED_PREFETCH=0 turns
    this off. Failures are ignored: the import on first use reports them."""
    import os
    if os.environ.get("COMPILED_PREFETCH", "1") == "0":
        return

    def run():
        import importlib
        # the frontend, the shape-only tracer capture imports on first use,
        # and what grpc imports when the first channel opens
        for name, package in ((".frontend", __name__), (".metatrace", __name__),
                              ("grpc._channel", None), ("grpc.experimental", None)):
            try:
                importlib.import_module(name, package)
            except Exception:
                pass
    import threading
    thread = threading.Thread(target=run, name="compiled-prefetch", daemon=True)
    thread.start()
    # A fork while the thread imports would leave the child with import
    # locks nobody releases: forks wait for the import to end.
    os.register_at_fork(before=lambda: thread.join(30))


_prefetch()

__all__ = [
    "ArtifactError",
    "ArtifactWarning",
    "CaptureError",
    "Captured",
    "CompileFallbackWarning",
    "UnsupportedCapture",

    "Client",
    "CompileError",
    "CompiledFunction",
    "DaemonBusy",
    "DaemonError",
    "DaemonUnavailable",
    "DaemonUnavailableWarning",
    "GuardFailure",
    "LoadedProgram",
    "SpecializationError",
    "__version__",
    "backend",
    "capture",
    "compile",
    "export_graph",
    "load_program",
    "trace",
]
