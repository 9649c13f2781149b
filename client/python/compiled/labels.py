"""Labels: what the daemon's cache calls an entry.

Every compile request carries a ``compiled.v1.Label`` (docs/protocol.md,
"Labels"): the program's name (a module's class, a function's qualified
name), the source file and line where it starts, and this machine's host
name. The daemon stores it with the entry the compile makes, and
``compilectl ls``, ``lookup`` and ``stats`` show it, so that a cache full of
hashes says which model each came from. It is never part of the key: one
graph sent from two places is one entry, which keeps the label of the
request that stored it.

The daemon refuses a label over its limits or with a control character
rather than cut it; :func:`make_label` makes every label fit: a long name
loses its end, a long path its beginning (the end says the most), control
characters and what is not UTF-8 become ``?``.

Computing a label is cheap (a few attribute reads, no source is read) and
is done once per compiled function.
"""

from __future__ import annotations

import inspect
import re
import socket
from typing import Any, Optional, Tuple

from .v1 import compiled_pb2

__all__ = ["LABEL_NAME_MAX", "LABEL_FILE_MAX", "LABEL_HOST_MAX", "make_label",
           "source_of", "source_of_code", "source_of_graph"]

# The daemon's limits of a label's strings, in bytes of UTF-8.
LABEL_NAME_MAX = 256
LABEL_FILE_MAX = 1024
LABEL_HOST_MAX = 255
_LINE_MAX = 2 ** 31 - 1

# C0 controls, DEL, C1 controls: what the daemon refuses in a label.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_host: Optional[str] = None


def _host_name() -> str:
    global _host
    if _host is None:
        try:
            _host = socket.gethostname()
        except OSError:
            _host = ""
    return _host


def _fit(text: Any, limit: int, keep_end: bool = False) -> str:
    """``text`` as a string the daemon takes in a label field of at most
    ``limit`` bytes."""
    # lone surrogates (a path decoded with surrogateescape) are not UTF-8
    text = str(text).encode("utf-8", "replace").decode("utf-8")
    text = _CONTROL.sub("?", text)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    if keep_end:  # "errors=ignore" drops the cut character's remains
        return "..." + data[len(data) - (limit - 3):].decode("utf-8", "ignore")
    return data[:limit - 3].decode("utf-8", "ignore") + "..."


def make_label(name: str = "", file: str = "", line: int = 0,
               host: Optional[str] = None) -> compiled_pb2.Label:
    """A ``compiled.v1.Label`` within the daemon's limits; ``host`` None is
    this machine's name."""
    try:
        line = int(line)
    except (TypeError, ValueError):
        line = 0
    return compiled_pb2.Label(
        name=_fit(name, LABEL_NAME_MAX),
        file=_fit(file, LABEL_FILE_MAX, keep_end=True),
        line=line if 0 < line <= _LINE_MAX else 0,
        host=_fit(_host_name() if host is None else host, LABEL_HOST_MAX))


def source_of_code(code) -> Tuple[str, str, int]:
    """(qualified name, file, first line) of a code object."""
    name = getattr(code, "co_qualname", None) or code.co_name
    return name, code.co_filename, code.co_firstlineno


def source_of(obj) -> Tuple[str, str, int]:
    """(name, source file, line) of what is compiled: a module's class and
    where its ``forward`` starts; a function's qualified name and where its
    ``def`` is. What cannot be found is empty (0 for the line)."""
    import torch
    if isinstance(obj, torch.fx.GraphModule):  # its forward is generated code
        return source_of_graph(obj.graph) or ("GraphModule", "", 0)
    if isinstance(obj, torch.nn.Module):
        cls = type(obj)
        name = cls.__qualname__
        target = cls.forward
    else:
        target = inspect.unwrap(obj) if callable(obj) else obj
        while hasattr(target, "func") and not hasattr(target, "__code__"):
            target = target.func  # functools.partial
        name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or \
            type(target).__qualname__
        if not hasattr(target, "__code__") and callable(target) and \
                not inspect.isroutine(target) and not inspect.isclass(target):
            target = type(target).__call__  # an object with __call__
    target = getattr(target, "__func__", target)  # a bound method
    code = getattr(target, "__code__", None)
    if code is None:
        return name, "", 0
    try:
        file = inspect.getsourcefile(target) or code.co_filename
    except TypeError:
        file = code.co_filename
    return name, file, code.co_firstlineno


# 'File "/path/model.py", line 42, in forward' in an FX node's stack_trace.
_FRAME = re.compile(r'File "(?P<file>[^"]*)", line (?P<line>\d+), in (?P<name>\S+)')


def source_of_graph(graph) -> Optional[Tuple[str, str, int]]:
    """(function name, file, line) of the outermost frame in the first
    stack trace FX recorded on a node of ``graph``: the function the graph
    was traced from. None when no node has one."""
    for node in graph.nodes:
        trace = node.meta.get("stack_trace") if hasattr(node, "meta") else None
        if trace:
            m = _FRAME.search(trace)
            if m:
                return m["name"], m["file"], int(m["line"])
    return None
