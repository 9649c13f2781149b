"""The memory of native calls: arenas, recycled outputs, donated inputs.

A native program (:mod:`compiled.native`) runs each call in an *arena*, one
buffer holding all its temporaries (``memory_plan.arena_bytes``, or an
expression of the size symbols), with a pointer table the generated code
reads; large arenas stay allocated between calls, and a program's first
arena is paged in by a thread while the program loads. Large program
outputs come from a pool of recycled blocks, and a caller that gives away
an input (the backward of a training step, docs/training.md "Memory") lets
later temporaries and outputs be carved out of its storage (``Donation``).
The sizes that decide each behaviour are this module's constants.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Dict, List, Optional

import torch

__all__ = ["Arena", "Donation", "KEEP_ARENA_BYTES", "PAGE_IN_BYTES", "PAGE_IN_MAX_BYTES",
           "PagedIn", "SymArena", "arena_view", "extent_bytes", "keep_arena", "outputs_allocator",
           "plain_empty_strided", "release_output_pool"]


class OutputPool:
    """Recycled memory for large program outputs.

    A program returns fresh tensors (the caller keeps them), and a fresh
    large allocation is freshly mapped memory: on these machines that costs
    about 2 ms per MiB of page faults on first touch, more than computing
    the output. So outputs of at least MIN_BYTES live in blocks this pool
    keeps: each output is a numpy view of a block, wrapped by
    torch.from_numpy; when the last reference to the output's storage dies
    (the tensor, its views, anything holding its storage), the view dies and
    a weakref finalizer returns the block. A block is handed out again only
    then, so a caller never sees its output change. Nothing else in the
    process is affected (no allocator settings change). Free blocks are kept
    per size, at most MAX_FREE of each.

    The one difference from eager: such an output's storage cannot be
    resized in place (Tensor.resize_ to a larger size raises). Set
    COMPILED_RECYCLE_OUTPUTS=0 to allocate outputs with torch instead.

    MAX_FREE is 0: no free block is kept between calls. A kept block is
    allocated while the next call runs the layers before its output is
    written, on top of what they need: in `make bench-models` that put
    lraspp_mobilenet_v3's peak heap at 67.4 MiB (a 32.2 MiB output block
    over its first layers' 35 MiB) against Inductor's 33.2, the ResNet
    generator block's at 16.9 against 12.9; without it both are
    Inductor's. It saved no time there: a fresh numpy block is paged in
    with transparent huge pages where the kernel allows them (numpy
    advises them for large arrays), lraspp's call took 179.7 ms with the
    block kept and 178.8 ms without (interleaved in one process).
    """

    MIN_BYTES = 1 << 20
    MAX_FREE = 0

    def __init__(self):
        self.free: Dict[int, List[Any]] = {}
        self.lock = threading.Lock()
        import numpy
        import weakref
        self.np = numpy
        self.weakref = weakref

    def _release(self, nbytes, block):
        with self.lock:
            blocks = self.free.setdefault(nbytes, [])
            if len(blocks) < self.MAX_FREE:
                blocks.append(block)

    def empty_strided(self, size, stride, dtype, nbytes):
        if nbytes < self.MIN_BYTES:
            return torch.empty_strided(size, stride, dtype=dtype)
        nbytes = (nbytes + 63) // 64 * 64
        with self.lock:
            blocks = self.free.get(nbytes)
            block = blocks.pop() if blocks else None
        if block is None:
            raw = self.np.empty(nbytes + 64, dtype=self.np.uint8)
            off = (-raw.ctypes.data) % 64
            block = raw[off:off + nbytes]
        view = block[:]  # dies with the output's storage
        self.weakref.finalize(view, self._release, nbytes, block)
        flat = torch.from_numpy(view).view(dtype)
        return flat.as_strided(size, stride)


_output_pool: Optional[OutputPool] = None


def release_output_pool() -> int:
    """Drops the output pool's free blocks (outputs still in use keep
    theirs); returns their bytes."""
    pool = _output_pool
    if pool is None:
        return 0
    with pool.lock:
        n = sum(len(blocks) * size for size, blocks in pool.free.items())
        pool.free.clear()
    return n


class Donation:
    """Inputs whose memory the caller of a boxed program gives away.

    A caller that holds the only reference to an input tensor besides the
    argument list (the backward of a training step: the gradient autograd
    passes in, docs/training.md "Memory") names its index in ``inputs``
    and passes the object as the program's second argument. When the
    program drops such an input after its last read, the input's storage
    becomes spare memory for this call: later temporaries and outputs are
    carved out of it (first fit, 64-byte aligned; see output() for which
    outputs). Autograd keeps the gradient alive for the whole backward
    call anyway, so this is memory eager would have freed after its first
    backward node. Only inputs the caller names are used, and only after
    the program no longer reads them."""

    __slots__ = ("inputs", "spare")

    def __init__(self, inputs):
        self.inputs = frozenset(inputs)
        self.spare: List[List[Any]] = []  # [tensor, its bytes, next free byte]

    def dead(self, *items) -> None:
        """(input index, tensor) pairs the program just stopped reading."""
        for i, t in items:
            if i in self.inputs and t.is_contiguous() and t.storage_offset() == 0 and \
                    not t.requires_grad and t.numel():
                self.spare.append([t, t.numel() * t.element_size(), 0])

    # spare storages this small may hold outputs of any size (an output
    # keeps its whole storage alive: at most this much more than needed)
    SMALL = 64 << 10

    def temp(self, size, stride, dtype, nbytes):
        """A temporary carved out of spare memory, or a new one."""
        t = self._carve(size, stride, dtype, nbytes, False) if self.spare else None
        return t if t is not None else torch.empty_strided(size, stride, dtype=dtype)

    def output(self, size, stride, dtype, nbytes, alloc):
        """An output carved out of spare memory, or alloc(size, stride,
        dtype, nbytes). An output outlives the call and keeps the whole
        storage alive, so it takes a small storage's next bytes, or the
        start of an untouched storage at most a third larger than itself."""
        t = self._carve(size, stride, dtype, nbytes, True) if self.spare else None
        return t if t is not None else alloc(size, stride, dtype, nbytes)

    def _carve(self, size, stride, dtype, nbytes, output):
        for entry in self.spare:
            t, whole, at = entry
            if not 0 < nbytes <= whole - at:
                continue
            if output and whole > self.SMALL and (at or whole > nbytes + nbytes // 3):
                continue
            entry[2] = (at + nbytes + 63) // 64 * 64
            item = t.element_size()
            if t.dtype == dtype and at % item == 0:  # no intermediate tensor
                return torch.as_strided(t, size, stride, at // item)
            flat = t.reshape(-1).view(torch.uint8)
            return flat[at:at + nbytes].view(dtype).as_strided(size, stride)
        return None


def extent_bytes(dtype, size, stride) -> int:
    """The bytes a tensor of this layout spans in its storage."""
    if 0 in size:
        return 0
    item = torch.empty((), dtype=dtype).element_size()
    return item * (1 + sum((n - 1) * st for n, st in zip(size, stride)))


def plain_empty_strided(size, stride, dtype, nbytes):
    return torch.empty_strided(size, stride, dtype=dtype)


def outputs_allocator():
    """torch.empty_strided, or the recycling pool (the default)."""
    global _output_pool
    if os.environ.get("COMPILED_RECYCLE_OUTPUTS", "1") in ("0", "false", "no"):
        return lambda size, stride, dtype, nbytes: torch.empty_strided(size, stride,
                                                                        dtype=dtype)
    if _output_pool is None:
        try:
            _output_pool = OutputPool()
        except ImportError:  # no numpy: plain allocations
            return lambda size, stride, dtype, nbytes: torch.empty_strided(
                size, stride, dtype=dtype)
    return _output_pool.empty_strided


class PagedIn:
    """A new arena buffer whose pages a thread touches now, while the
    loader goes on generating the program: the first call finds the memory
    mapped instead of faulting it in page by page (densenet121's 8 MB: 4 ms
    of its first call). take() waits for the thread."""
    __slots__ = ("buf", "thread")

    def __init__(self, nbytes: int):
        self.buf = _arena_buffer(nbytes)
        # the thread holds the tensor until it is done, whoever drops this
        self.thread = threading.Thread(target=_zero, args=(self.buf,), daemon=True,
                                       name="compiled arena page-in")
        self.thread.start()

    def get(self) -> torch.Tensor:
        self.thread.join()
        return self.buf


def _arena_buffer(nbytes: int) -> torch.Tensor:
    # slack past the end: a zero-size view at the arena's end (or of an
    # empty arena) still slices one element to view its dtype
    return torch.empty(nbytes + 16, dtype=torch.uint8)


def _zero(buf: torch.Tensor) -> None:
    ctypes.memset(buf.data_ptr(), 0, buf.numel())  # ctypes lets go of the GIL


# Arenas from this size on are paged in by a thread when a program loads
# (a smaller one costs less than starting the thread), up to the largest:
# until its first call, a program holds its arena, and one that is never
# called (a backward nobody runs) would hold a large one for good.
PAGE_IN_BYTES = 1 << 20
PAGE_IN_MAX_BYTES = 64 << 20


class Arena:
    """One call's memory: the arena tensor, its pointer table and the views
    of it that ATen calls use. The pointer table lives as long as the
    object (the pool keeps it); the arena itself is made by take(), when a
    call first needs it (or taken from ``paged_in``, the first arena of a
    program), and dropped by done() at the call's end unless `keep` (see
    keep_arena)."""
    __slots__ = ("nbytes", "specs", "keep", "buf", "p", "views", "paged_in")

    def __init__(self, nbytes: int, nslots: int, specs, keep: bool,
                 paged_in: Optional[PagedIn] = None):
        self.nbytes, self.specs, self.keep = nbytes, specs, keep
        self.buf = None
        self.views = ()
        self.p = (ctypes.c_void_p * max(nslots, 1))()
        self.paged_in = paged_in

    def take(self):
        if self.buf is None:
            if self.paged_in is not None:
                self.buf, self.paged_in = self.paged_in.get(), None
            else:
                self.buf = _arena_buffer(self.nbytes)
            self.p[0] = self.buf.data_ptr()
            views = []
            for dtype, offset, nbytes_v, size, stride, extra in self.specs:
                item = torch.empty((), dtype=dtype).element_size()
                flat = self.buf[offset:offset + max(nbytes_v, item)].view(dtype)
                views.append(flat.as_strided(size, stride, flat.storage_offset() + extra))
            self.views = tuple(views)
        return self.views

    def done(self):
        if not self.keep:
            self.release()

    def release(self) -> int:
        """Drops the arena (the next take() makes a new one), and the one
        paged in for it if no call took it yet; their bytes."""
        n = self.buf.numel() if self.buf is not None else 0
        if self.paged_in is not None:  # its thread holds the buffer until done
            n += self.paged_in.buf.numel()
            self.paged_in = None
        self.buf, self.views, self.p[0] = None, (), None
        return n


# glibc maps every allocation of at least this size afresh (its largest
# mmap threshold): such an arena costs its page faults on every call unless
# kept; a smaller one comes back from malloc's free lists, as eager's
# temporaries do, and keeping it would only add to the process's memory.
KEEP_ARENA_BYTES = 32 << 20


def keep_arena(nbytes: int) -> bool:
    """Whether an arena of nbytes stays allocated between calls:
    COMPILED_ARENA_REUSE=0 never, =all always, else from KEEP_ARENA_BYTES."""
    mode = os.environ.get("COMPILED_ARENA_REUSE", "1").lower()
    if mode in ("0", "false", "no"):
        return False
    return mode == "all" or nbytes >= KEEP_ARENA_BYTES


class SymArena:
    """The arena of a program with size symbols: its size is an expression
    evaluated per call. The buffer stays between calls when it is large
    (KEEP_ARENA_BYTES, as Arena) and grows when a call needs more; its
    pointer table and symbol array live as long as the object (the
    program's pool keeps it)."""
    __slots__ = ("p", "s", "buf", "keep_all", "keep_none")

    def __init__(self, nslots: int, nsyms: int):
        self.p = (ctypes.c_void_p * max(nslots, 1))()
        self.s = (ctypes.c_int64 * max(nsyms, 1))()
        self.buf = None
        # the COMPILED_ARENA_REUSE setting, read once (done() runs per call)
        self.keep_all = keep_arena(0)
        self.keep_none = not keep_arena(KEEP_ARENA_BYTES)

    def take(self, nbytes: int) -> torch.Tensor:
        if self.buf is None or self.buf.numel() < nbytes + 16:
            self.buf = _arena_buffer(nbytes)
        self.p[0] = self.buf.data_ptr()
        return self.buf

    def done(self):
        buf = self.buf
        if buf is not None and not self.keep_all and \
                (self.keep_none or buf.numel() < KEEP_ARENA_BYTES):
            self.buf, self.p[0] = None, None

    def release(self) -> int:
        n = self.buf.numel() if self.buf is not None else 0
        self.buf, self.p[0] = None, None
        return n


def arena_view(buf, offset: int, nbytes: int, dtype, size, stride, extra: int):
    """A view of the arena's bytes [offset, offset + nbytes) as dtype."""
    item = torch.empty((), dtype=dtype).element_size()
    flat = buf[offset:offset + max(nbytes, item)].view(dtype)
    return flat.as_strided(size, stride, flat.storage_offset() + extra)
