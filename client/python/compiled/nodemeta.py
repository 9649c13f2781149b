"""Node metadata collected while tracing: stack traces and module paths.

Capture (:mod:`compiled.capture`) tags every FX node it records with the
user's stack at the ATen call that made it and the qualified name of the
module running then; the encoder (:mod:`compiled.encode`) writes them into
the Node's metadata. Stack traces show the user's frames and torch's nn
modules and functionals, with machine-independent paths; the capture
machinery's own frames and torch's dispatch and tracing frames are left out.
"""

from __future__ import annotations

import linecache
import os
import sys
import threading
from typing import Any, Dict, List, Optional

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode

from .encode import NODE_META_MODULE, NODE_META_STACK

__all__ = ["ModulePathHooks", "NodeAnnotator", "meta_annotator", "tracing_graph"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Frames of the capture machinery itself are never shown.
_HIDDEN_FILES = frozenset(os.path.join(_PACKAGE_DIR, name)
                          for name in ("capture.py", "metatrace.py", "nodemeta.py"))


def _torch_frame_is_user_level(relpath: str) -> bool:
    """Frames inside torch worth showing: the nn modules and functionals a
    user calls, not the dispatch, tracing and hook machinery."""
    relpath = relpath.replace(os.sep, "/")
    if relpath in ("functional.py", "nn/functional.py"):
        return True
    return relpath.startswith("nn/modules/") and relpath != "nn/modules/module.py"


class _FrameFormatter:
    """Formats Python frames as stack-trace text with machine-independent
    paths: each file is shown relative to the longest ``sys.path`` entry that
    contains it (``torch/nn/modules/linear.py``, ``regen.py``)."""

    def __init__(self):
        roots = {os.path.abspath(entry or os.curdir) for entry in sys.path}
        self._roots = sorted(roots, key=len, reverse=True)
        self._paths: Dict[str, Optional[str]] = {}
        self._entries: Dict[Any, str] = {}

    def display_path(self, filename: str) -> Optional[str]:
        """The path to show for ``filename``, or None to hide the frame."""
        if filename not in self._paths:
            self._paths[filename] = self._compute(filename)
        return self._paths[filename]

    def _compute(self, filename: str) -> Optional[str]:
        if filename.startswith("<"):
            return filename
        path = os.path.abspath(filename)
        if path in _HIDDEN_FILES:
            return None
        if path.startswith(_TORCH_DIR + os.sep):
            if not _torch_frame_is_user_level(os.path.relpath(path, _TORCH_DIR)):
                return None
        for root in self._roots:
            if path.startswith(root + os.sep):
                return os.path.relpath(path, root).replace(os.sep, "/")
        return path

    def format(self, frame, stop_code) -> str:
        """The stack from just inside the frame running ``stop_code`` down to
        ``frame``, outermost first, as ``traceback.format_list`` writes it.
        Each frame's text is made once per (code, line) and reused."""
        entries = []
        cache = self._entries
        while frame is not None and frame.f_code is not stop_code:
            key = (frame.f_code, frame.f_lineno)
            entry = cache.get(key)
            if entry is None:
                path = self.display_path(frame.f_code.co_filename)
                if path is None:
                    entry = ""
                else:
                    line = _source_line(frame)
                    entry = (f'  File "{path}", line {frame.f_lineno}, in {frame.f_code.co_name}\n'
                             + (f"    {line}\n" if line else ""))
                cache[key] = entry
            if entry:
                entries.append(entry)
            frame = frame.f_back
        entries.reverse()
        return "".join(_collapse_repeats(entries))


def _collapse_repeats(entries: List[str]) -> List[str]:
    """traceback's rule: after three identical frames in a row, the rest
    become one "[Previous line repeated N more times]" line."""
    out: List[str] = []
    last, count = None, 0
    for entry in entries + [None]:
        if entry is not None and entry == last:
            count += 1
            if count <= 3:
                out.append(entry)
            continue
        if count > 3:
            n = count - 3
            out.append(f"  [Previous line repeated {n} more time{'s' if n > 1 else ''}]\n")
        if entry is not None:
            out.append(entry)
        last, count = entry, 1
    return out


def _source_line(frame) -> str:
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()


class NodeAnnotator(TorchDispatchMode):
    """A dispatch mode pushed above make_fx's proxy mode while tracing.

    Every ATen call reaches this mode first; it lets the call go on to the
    proxy mode (which records one or more FX nodes) and then tags the FX
    nodes that appeared with the current stack trace and module path.
    """

    def __init__(self, graph: torch.fx.Graph, stop_code, module_stack: List[str]):
        super().__init__()
        self.graph = graph
        self.stop_code = stop_code
        self.module_stack = module_stack
        self.frames = _FrameFormatter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        last = next(iter(reversed(self.graph.nodes)), None)
        out = func(*args, **(kwargs or {}))
        new_nodes = []
        for node in reversed(self.graph.nodes):
            if node is last:
                break
            new_nodes.append(node)
        if new_nodes:
            stack = self.frames.format(sys._getframe(1), self.stop_code)
            module_path = self.module_stack[-1] if self.module_stack else ""
            for node in new_nodes:
                node.meta.setdefault(NODE_META_STACK, stack)
                node.meta.setdefault(NODE_META_MODULE, module_path)
        return out


def meta_annotator(module: Optional[torch.nn.Module]):
    """For the shape-only trace: (forward hooks, annotate(nodes)) tagging
    new FX nodes with the stack trace and module path, as NodeAnnotator
    does for make_fx."""
    def factory(graph, stop_code):
        hooks = ModulePathHooks(module)
        frames = _FrameFormatter()

        def annotate(nodes):
            stack = frames.format(sys._getframe(1), stop_code)
            module_path = hooks.stack[-1] if hooks.stack else ""
            for node in nodes:
                node.meta[NODE_META_STACK] = stack
                node.meta[NODE_META_MODULE] = module_path
        return hooks, annotate
    return factory


def tracing_graph() -> Optional[torch.fx.Graph]:
    """The FX graph make_fx is recording into, found on the dispatch mode
    stack (None if this torch lays it out differently: no metadata then)."""
    try:
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
        modes = _get_current_dispatch_mode_stack()
    except Exception:  # private API; metadata is optional
        return None
    for mode in reversed(modes):
        graph = getattr(getattr(mode, "tracer", None), "graph", None)
        if isinstance(graph, torch.fx.Graph):
            return graph
    return None


class ModulePathHooks:
    """Forward hooks that keep a stack of the qualified names of the modules
    currently running inside ``root`` ("" for the root itself).

    Two process-wide hooks (``register_module_forward_pre_hook``) that look
    the module up by identity, rather than a pair per module: registering
    and removing 866 hooks took 2 ms of densenet121's capture. They see
    the calls of the thread that entered only."""

    def __init__(self, root: Optional[torch.nn.Module]):
        self.stack: List[str] = []
        self._handles = []
        self._root = root
        self._names: Dict[int, str] = {}
        self._thread = None

    def __enter__(self):
        if self._root is not None:
            self._names = {id(module): name for name, module in self._root.named_modules()}
            self._thread = threading.get_ident()
            self._handles = [torch.nn.modules.module.register_module_forward_pre_hook(self._pre),
                             torch.nn.modules.module.register_module_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _pre(self, module, inputs):
        name = self._names.get(id(module))
        if name is not None and threading.get_ident() == self._thread:
            self.stack.append(name)

    def _post(self, module, inputs, output):
        if id(module) in self._names and threading.get_ident() == self._thread and self.stack:
            self.stack.pop()
