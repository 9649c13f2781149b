"""Packages: a torch.export program compiled ahead of time.

``compilectl package model.pt2 -o model.cpkg`` writes one file holding the
artifact the daemon compiled for the program, the program's weights and
constants, and its calling convention (docs/artifact.md, "Packages").
:func:`load_package` turns it into a callable with the exported module's
signature. Loading needs no daemon, no tracing and no C compiler: the
weights are views of the file (mapped copy-on-write, so buffers the program
writes change only this process's copy), the artifact is run by
:mod:`compiled.runtime`, whose native code is the shared object inside it.

Everything is checked before anything runs: the format version, the
SHA-256 over the whole file, the artifact's own digest (and its signature
when keys are given), the torch release, the CPU's features; each failure
is a :class:`PackageError` naming what does not match.
"""
from __future__ import annotations

import hashlib
import json
import mmap
import os
import struct
from typing import Any, Dict, List, Optional

import torch
from torch.utils import _pytree as pytree

from . import ArtifactError, formats
from . import target as target_module

__all__ = ["PackageError", "LoadedPackage", "load_package", "MAGIC", "VERSION"]

MAGIC = b"CPKG\r\n\x1a\n"
VERSION = (1, 0)      # the major version this loader reads; minors add fields
_PREFIX = 24          # magic, major, minor, header length
_ALIGN = 64
_DIGEST = 32


class PackageError(ArtifactError):
    """A package that cannot be loaded here: corrupt, of another format
    version, or made for another torch release or CPU."""


def _int(v: Dict[str, Any], what: str) -> int:
    if not isinstance(v, dict) or not isinstance(v.get("as_int"), int):
        raise PackageError(f"{what}: expected an integer size")
    return v["as_int"]


def _release(version: str) -> str:
    """"2.13.0+cpu" -> "2.13"."""
    return ".".join(version.split("+")[0].split(".")[:2])


class LoadedPackage:
    """A loaded package: call it as the exported module.

    Attributes:
        program: the :class:`compiled.runtime.LoadedProgram` it runs.
        header: the package's header (the calling convention).
        state: ``{target: tensor}`` of the parameters, buffers and constants
            (buffers the program writes are updated here, as in the module).
    """

    def __init__(self, path: str, header: Dict[str, Any], program, state: Dict[str, torch.Tensor],
                 user_inputs: List[int], outputs: List[Dict[str, Any]],
                 checks: List[tuple]):
        self.path = path
        self.header = header
        self.program = program
        self.state = state
        self._fn = program.fn
        self._user_inputs = user_inputs
        self._outputs = outputs
        self._checks = checks
        self._in_spec = (pytree.treespec_loads(header["in_spec"])
                         if header.get("in_spec") else None)
        self._out_spec = (pytree.treespec_loads(header["out_spec"])
                          if header.get("out_spec") else None)
        self._user_names = [header["inputs"][i].get("name", f"input {i}")
                            for i in user_inputs]

    def __call__(self, *args, **kwargs):
        flat, spec = pytree.tree_flatten((args, kwargs))
        if self._in_spec is not None and spec != self._in_spec:
            raise TypeError(f"{self.path}: the exported module takes {self._in_spec}, "
                            f"called with {spec}")
        if len(flat) != len(self._user_inputs):
            raise TypeError(f"{self.path}: the exported module takes {len(self._user_inputs)} "
                            f"inputs ({', '.join(self._user_names)}), got {len(flat)}")
        for index, dim, name, lo, hi in self._checks:
            t = flat[index]
            if not isinstance(t, torch.Tensor) or t.dim() <= dim:
                continue  # the program's own input checks report it
            n = t.shape[dim]
            if (lo is not None and n < lo) or (hi is not None and n > hi):
                raise ValueError(
                    f"{self.path}: input '{self._user_names[index]}' dimension {dim} is {n}, "
                    f"outside the range of {name}, [{lo}, {'inf' if hi is None else hi}], "
                    f"the program was exported for")
        results = self._fn(*flat)
        if not isinstance(results, (tuple, list)):
            results = (results,)
        user = []
        for out, value in zip(self._outputs, results):
            kind = out["kind"]
            if kind == "buffer_mutation":
                self.state[out["target"]].copy_(value)
            elif kind == "user_input_mutation":
                flat[self._user_names.index(out["target"])].copy_(value)
            else:
                user.append(value)
        if self._out_spec is not None:
            return pytree.tree_unflatten(user, self._out_spec)
        return user[0] if len(user) == 1 else tuple(user)

    def __repr__(self) -> str:
        return (f"<LoadedPackage {os.path.basename(self.path)}: "
                f"{len(self._user_inputs)} inputs, target {self.header.get('target')}>")


class _Digest:
    """The SHA-256 of the file, computed on a thread of its own (hashlib
    releases the GIL), so that a large package's weights are hashed while
    the program is prepared; ``check()`` waits for it and raises when the
    file is corrupt. Nothing the package holds runs or is returned before
    it passed: the artifact, the one part that is executed, has its own
    digest checked before it is loaded."""

    def __init__(self, path: str, mm, size: int):
        import threading
        self.path, self.want, self.ok = path, bytes(mm[size - _DIGEST:]), None
        view = memoryview(mm)[:size - _DIGEST]

        def run():
            self.ok = hashlib.sha256(view).digest() == self.want
        self.thread = threading.Thread(target=run, name="compiled-package-digest", daemon=True)
        self.thread.start()

    def check(self) -> None:
        self.thread.join()
        if not self.ok:
            raise PackageError(f"{self.path}: corrupt: the SHA-256 of the contents does not "
                               f"match the one the package ends with")


def read_header(path: str, digest_thread: bool = False):
    """Reads and checks a package: returns (header, mapped file, data start,
    data end), and with `digest_thread` a fifth item, the _Digest being
    computed (the caller must check() it). Raises PackageError for anything
    malformed."""
    try:
        f = open(path, "rb")
    except OSError as e:
        raise PackageError(f"{path}: {e.strerror}") from e
    with f:
        size = os.fstat(f.fileno()).st_size
        if size < _PREFIX + _DIGEST:
            raise PackageError(f"{path}: {size} bytes, too short for a package")
        # private and writable: weights are views of it, and the buffers a
        # program writes must not write the file
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
    if mm[:8] != MAGIC:
        raise PackageError(f"{path}: not a compiled package (bad magic {bytes(mm[:8])!r})")
    major, minor, hlen = struct.unpack_from("<IIQ", mm, 8)
    if major != VERSION[0]:
        raise PackageError(f"{path}: package format {major}.{minor} is not supported "
                           f"(this loader reads {VERSION[0]}.x)")
    if hlen > size - _PREFIX - _DIGEST:
        raise PackageError(f"{path}: the header length ({hlen}) runs past the end of the file")
    digest = _Digest(path, mm, size)
    if not digest_thread:
        digest.check()
    try:
        header = json.loads(bytes(mm[_PREFIX:_PREFIX + hlen]))
    except ValueError as e:
        digest.check()  # corruption says so first
        raise PackageError(f"{path}: the header is not valid JSON: {e}") from e
    if not isinstance(header, dict) or header.get("format") != "compiled-package":
        digest.check()
        raise PackageError(f"{path}: the header is not a compiled package's")
    data_start = (_PREFIX + hlen + _ALIGN - 1) // _ALIGN * _ALIGN
    if digest_thread:
        return header, mm, data_start, size - _DIGEST, digest
    return header, mm, data_start, size - _DIGEST


def _blob(path, mm, data_start, data_end, entry: Dict[str, Any], what: str) -> memoryview:
    off, length = entry.get("offset"), entry.get("length")
    if not isinstance(off, int) or not isinstance(length, int) or off < 0 or length < 0 or \
            data_start + off + length > data_end:
        raise PackageError(f"{path}: {what}: offset {off} and length {length} are outside "
                           f"the data section")
    return memoryview(mm)[data_start + off:data_start + off + length]


def _check_cpu(path: str, target: str) -> None:
    need = target_module.MARCH_FEATURES.get(target)
    if need is None:
        raise PackageError(f"{path}: compiled for '{target}', a target this loader does not know")
    have = set(target_module.cpu_features())
    missing = sorted(need - have)
    if missing:
        raise PackageError(f"{path}: compiled for {target}, whose CPU features "
                           f"{', '.join(missing)} this CPU lacks; package it again with "
                           f"--target for this machine")


def load_package(path: str, *, trusted_keys: Optional[Dict[str, bytes]] = None,
                 native: bool = True) -> LoadedPackage:
    """Loads a package written by ``compilectl package``.

    Args:
        path: the ``.cpkg`` file.
        trusted_keys: ``{key id: secret}`` as for :class:`compiled.Client`:
            when given, the artifact must carry a valid signature by one of
            them.
        native: run the native code (False: the artifact's ATen program).

    Returns a :class:`LoadedPackage`, called as the exported module's
    ``forward`` (same arguments, same output structure).

    Raises:
        PackageError: corrupt file, unknown format version, another torch
            release, a CPU without the target's features, a bad signature.
    """
    header, mm, data_start, data_end, digest = read_header(path, digest_thread=True)
    try:
        loaded = _load(path, header, mm, data_start, data_end, trusted_keys, native)
    except Exception:
        digest.check()  # a corrupt file is reported as such, whatever broke
        raise
    digest.check()
    return loaded


def _load(path, header, mm, data_start, data_end, trusted_keys, native) -> LoadedPackage:
    from . import runtime
    want = header.get("torch_version", "")
    if _release(want) != _release(torch.__version__):
        raise PackageError(f"{path}: made for torch {want}; this process runs torch "
                           f"{torch.__version__} (the program's operators and their schemas "
                           f"are those of torch {_release(want)})")
    _check_cpu(path, header.get("target", ""))
    art_entry = header.get("artifact") or {}
    art = bytes(_blob(path, mm, data_start, data_end, art_entry, "artifact"))
    if hashlib.sha256(art).hexdigest() != art_entry.get("sha256"):
        raise PackageError(f"{path}: the artifact's SHA-256 does not match the header's")
    parsed = runtime.parse_artifact(art)
    if trusted_keys is not None:
        from .client import verify_signature
        verify_signature(trusted_keys, parsed.key, art, art_entry.get("signature", ""),
                         art_entry.get("signature_key", ""))
    code_target = parsed.native_program.code.target if parsed.HasField("native_program") else ""
    if code_target:
        _check_cpu(path, code_target)

    inputs = header.get("inputs")
    if not isinstance(inputs, list):
        raise PackageError(f"{path}: the header has no inputs")
    if len(inputs) != len(parsed.program.inputs):
        raise PackageError(f"{path}: the header lists {len(inputs)} inputs, the artifact "
                           f"has {len(parsed.program.inputs)}")
    bound: Dict[int, torch.Tensor] = {}
    state: Dict[str, torch.Tensor] = {}
    for i, t in enumerate(header.get("tensors", [])):
        meta = t.get("meta") or {}
        dtype = formats.DTYPE_BY_ENUM_NAME.get(meta.get("dtype"))
        if dtype is None:
            raise PackageError(f"{path}: tensors[{i}] ({t.get('target')}): dtype "
                               f"{meta.get('dtype')!r} is not supported")
        blob = _blob(path, mm, data_start, data_end, t, f"tensors[{i}] ({t.get('target')})")
        sizes = [_int(s, f"tensors[{i}].meta.sizes") for s in meta.get("sizes", [])]
        strides = [_int(s, f"tensors[{i}].meta.strides") for s in meta.get("strides", [])]
        offset = _int(meta.get("storage_offset", {"as_int": 0}), f"tensors[{i}].meta")
        esize = torch.empty((), dtype=dtype).element_size()
        extent = 0 if 0 in sizes else (offset + sum((n - 1) * s for n, s in zip(sizes, strides))
                                        + 1) * esize
        if extent > len(blob) or len(blob) % esize:
            raise PackageError(f"{path}: tensors[{i}] ({t.get('target')}): {len(blob)} bytes "
                               f"do not hold sizes {sizes} strides {strides}")
        flat = (torch.frombuffer(blob, dtype=dtype) if len(blob)
                else torch.empty(0, dtype=dtype))
        tensor = flat.as_strided(sizes, strides, offset)
        index = t.get("input")
        if not isinstance(index, int) or not 0 <= index < len(inputs):
            raise PackageError(f"{path}: tensors[{i}]: input {index} is out of range")
        bound[index] = tensor
        state[t.get("target")] = tensor
    user_inputs = [i for i, spec in enumerate(inputs) if spec.get("kind") == "user_input"]
    missing = [i for i, spec in enumerate(inputs)
               if spec.get("kind") != "user_input" and i not in bound]
    if missing:
        raise PackageError(f"{path}: inputs {missing} ({inputs[missing[0]].get('target')}) "
                           f"have no tensor in the package")

    # dynamic dimensions: each bare symbol of a user input's size, with the
    # range the program was exported for, is checked on every call
    ranges = {s["name"]: (s.get("min"), s.get("max")) for s in header.get("symbols", [])}
    checks = []
    for pos, i in enumerate(user_inputs):
        for dim, size in enumerate((inputs[i].get("meta") or {}).get("sizes", [])):
            expr = (size.get("as_expr") or {}).get("expr", "") if isinstance(size, dict) else ""
            name = expr.strip("() ")
            if name in ranges:
                checks.append((pos, dim, name) + ranges[name])

    program = runtime.load(parsed, constants=bound, native=native)
    outputs = header.get("outputs", [])
    for o in outputs:
        if o.get("kind") == "buffer_mutation" and o.get("target") not in state:
            raise PackageError(f"{path}: output writes buffer {o.get('target')!r}, "
                               f"which the package does not hold")
    return LoadedPackage(path, header, program, state, user_inputs, outputs, checks)
