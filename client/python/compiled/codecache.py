"""A per-user cache of the code objects of the Python this package
generates (the programs :func:`compiled.runtime.load` builds, the
frontend's module-state readers), as Python keeps ``.pyc`` files for
modules: a new process that loads a program some process on this machine
loaded before skips compiling its source. densenet121's program is 1,300
lines (14 ms to compile) and its state reader 440 (6 ms); reading either's
code object back takes well under a millisecond.

Where: ``$COMPILED_CODE_CACHE``, else ``$XDG_CACHE_HOME/compiled/code``,
else ``~/.cache/compiled/code``; ``COMPILED_CODE_CACHE=off`` (or ``0``,
``no``, ``false``, empty) turns it off. The directory is made private
(mode 0700) and used only while it is owned by this user and writable by
no one else: a code object read from it runs in this process, so it must
not be anyone else's to write, the same trust Python gives
``__pycache__``. An entry is named by the SHA-256 of the interpreter's
bytecode magic number and the source, and holds both ahead of the
marshalled code: an entry of another interpreter version, a truncated or
corrupt one, is ignored (compiled afresh and rewritten). Entries are
written atomically (a private temporary file renamed into place; one a
dead process left is removed after an hour); at most ``MAX_ENTRIES`` are
kept, the least recently written removed first.

Code objects remember the file name they were compiled under; an entry
read back is renamed to the caller's name (tracebacks and ``linecache``
then find the source the caller registers).
"""

import hashlib
import importlib.util
import logging
import marshal
import os
import tempfile
import time
import types
from typing import Optional

__all__ = ["compile_cached", "directory", "store"]

MAX_ENTRIES = 512

_log = logging.getLogger("compiled.codecache")
_MAGIC = importlib.util.MAGIC_NUMBER
_OFF = {"", "0", "off", "no", "false"}
_resolved = {}  # path setting -> usable directory or None


def directory() -> Optional[str]:
    """The cache directory, made if missing; None when turned off or not
    private to this user."""
    env = os.environ.get("COMPILED_CODE_CACHE")
    if env is not None and env.strip().lower() in _OFF:
        return None
    if env is None:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        env = os.path.join(base, "compiled", "code")
    if env not in _resolved:
        _resolved[env] = _private_dir(env)
    return _resolved[env]


def _private_dir(path: str) -> Optional[str]:
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        _log.debug("code cache %s unusable: %s", path, e)
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        _log.warning("compiled: not using the code cache %s: it is not private to this user "
                     "(owner uid %d, mode %o)", path, st.st_uid, st.st_mode & 0o777)
        return None
    return path


def compile_cached(source: str, filename: str) -> types.CodeType:
    """``compile(source, filename, "exec")``, through the cache."""
    where = directory()
    if where is None:
        return compile(source, filename, "exec")
    digest = hashlib.sha256(_MAGIC + source.encode()).digest()
    path = os.path.join(where, digest.hex())
    head = _MAGIC + digest
    try:
        with open(path, "rb") as f:
            data = f.read()
        if data[:len(head)] == head:
            return _renamed(marshal.loads(data[len(head):]), filename)
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = compile(source, filename, "exec")
    _store(where, path, head + marshal.dumps(code))
    return code


def _renamed(code: types.CodeType, filename: str) -> types.CodeType:
    """code (and every code object in its constants) under filename."""
    consts = tuple(_renamed(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def store(path: str, data: bytes) -> None:
    """Writes ``data`` as the entry at ``path`` (a file in :func:`directory`)
    atomically, pruning the directory as every entry does."""
    _store(os.path.dirname(path), path, data)


def _store(where: str, path: str, data: bytes) -> None:
    try:
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        _prune(where)
    except OSError as e:
        _log.debug("code cache: could not store %s: %s", path, e)


def _prune(where: str) -> None:
    """Keeps the MAX_ENTRIES most recently written entries, and removes
    temporary files a process left behind (it died between writing and
    renaming) once they are an hour old."""
    def written(e):
        try:
            return e.stat().st_mtime
        except OSError:  # removed meanwhile
            return 0.0
    with os.scandir(where) as it:
        files = [e for e in it if e.is_file()]
    stale = time.time() - 3600
    for e in files:
        if e.name.startswith(".tmp-") and written(e) < stale:
            try:
                os.unlink(e.path)
            except OSError:
                pass
    entries = [e for e in files if not e.name.startswith(".tmp-")]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=written)
    for e in entries[:len(entries) - MAX_ENTRIES]:
        try:
            os.unlink(e.path)
        except OSError:
            pass
