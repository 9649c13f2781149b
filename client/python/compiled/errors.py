"""Exceptions and warnings of the compiled client (re-exported by ``compiled``).

Hierarchy::

    CaptureError                     (defined in compiled/__init__.py)
    DaemonError                      anything the daemon answered with an error
    ├── DaemonUnavailable            it could not be reached (UNAVAILABLE)
    ├── DaemonBusy                   backpressure (RESOURCE_EXHAUSTED) that
    │                                did not clear after a few retries
    └── CompileError                 the daemon refused the graph
                                     (INVALID_ARGUMENT / UNIMPLEMENTED)
    ArtifactError                    an artifact this runtime cannot run
    SpecializationError (ValueError) a program called with a non-tensor input
                                     different from the one it was built for
    GuardFailure (ValueError)        a program compiled for symbolic sizes
                                     called with inputs a guard rejects
    DaemonUnavailableWarning         compile() fell back to eager execution
                                     (any DaemonError but CompileError)
"""

from typing import Optional


class DaemonError(Exception):
    """The daemon answered a request with an error status.

    Attributes:
        code: the ``grpc.StatusCode`` (None when no call was made).
        details: the status message as the daemon sent it.
    """

    def __init__(self, message: str, code=None, details: str = ""):
        super().__init__(message)
        self.code = code
        self.details = details


class DaemonUnavailable(DaemonError):
    """The daemon could not be reached (connection refused, shutting down,
    name resolution failure...): gRPC status UNAVAILABLE."""


class DaemonBusy(DaemonError):
    """The daemon kept answering RESOURCE_EXHAUSTED (its compile queue is
    full, or the request is over its message limit)."""


class CompileError(DaemonError):
    """The daemon refused the graph (status INVALID_ARGUMENT, or UNIMPLEMENTED
    for a graph feature it does not support yet).

    ``str(err)`` is the daemon's full message, e.g. ``node 2 (%relu =
    aten::nope): operator 'aten::nope' is missing from the operator table``.

    Attributes:
        message: the daemon's message (GraphError.message, else the status
            details).
        node: index of the offending node in the graph, -1 when the error is
            not about a node.
        argument: the argument concerned, "" when none.
        error_code: the daemon's error class: "INVAL", "LIMIT", "VERSION",
            "MALFORMED" ("" when the daemon sent no GraphError).
    """

    def __init__(self, message: str, code=None, details: str = "", node: int = -1,
                 argument: str = "", error_code: str = ""):
        super().__init__(message, code, details)
        self.message = message
        self.node = node
        self.argument = argument
        self.error_code = error_code


class ArtifactError(Exception):
    """An artifact cannot be run by this runtime: unknown major version,
    malformed program (bad value index, a value read before it is written),
    an operator this torch does not have, or an unsupported feature."""


class SpecializationError(ValueError):
    """A program was called with a non-tensor input (a Python number, string,
    None) other than the constant it was compiled for.

    Attributes:
        index: the program input concerned.
        expected: the constant baked into the program.
        got: what the caller passed.
    """

    def __init__(self, index: int, expected, got):
        super().__init__(f"program input {index} was specialized to {expected!r} "
                         f"({type(expected).__name__}) when it was compiled; got {got!r} "
                         f"({type(got).__name__}). Recompile for this value.")
        self.index = index
        self.expected = expected
        self.got = got


class GuardFailure(ValueError):
    """A program compiled for symbolic sizes was called with inputs one of
    its guards rejects (docs/dynamic-shapes.md): the artifact does not
    apply to this call. The caller compiles again for these inputs (a
    graph with the sizes they have, or with other symbols), or runs its
    ATen program.

    Attributes:
        kind: the guard's kind, a ``GuardKind`` name without its prefix
            ("INPUT", "BROADCAST", "DIVISIBLE", "BOUND", "RANGE").
        guard: the guard's expression over the size symbols ("s0 % 4 == 0");
            for an INPUT check, what the program expected of the input.
        text: the guard for people, as the daemon wrote it.
        symbols: the symbols' values for the call, ``{"s0": 5, ...}``.
        input: the program input concerned (INPUT checks), else -1.
    """

    def __init__(self, kind: str, guard: str, text: str, symbols, input: int = -1):
        values = ", ".join(f"{k} = {v}" for k, v in symbols.items())
        super().__init__(f"the compiled program's {kind.lower()} guard failed: "
                         f"{text or guard}" + (f" (with {values})" if values else "") +
                         ". Recompile for these inputs.")
        self.kind = kind
        self.guard = guard
        self.text = text
        self.symbols = dict(symbols)
        self.input = input


class DaemonUnavailableWarning(RuntimeWarning):
    """compile() got no program from the daemon for a reason other than the
    graph (unreachable, stopping, busy, deadline, cancelled, internal error)
    and runs the function eagerly; it compiles again after a back-off."""


class CompileFallbackWarning(RuntimeWarning):
    """compile() met a program it cannot capture faithfully
    (:class:`compiled.UnsupportedCapture`) and runs it eagerly."""


class ArtifactWarning(RuntimeWarning):
    """The daemon's artifact for a program could not be loaded (malformed,
    a missing symbol, built for another runtime): the program runs eagerly
    for that signature. The artifact's key is in the message, for
    ``compilectl lookup`` and ``compilectl evict``."""



def _describe_status(code, details: Optional[str]) -> str:
    name = getattr(code, "name", str(code))
    return f"{name}: {details}" if details else name
