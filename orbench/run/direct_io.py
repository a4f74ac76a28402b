"""Writing a large file past the page cache (Linux's ``O_DIRECT``), for output written once and not
read back by the process that writes it: the Every Eval Ever per-sample lines, gigabytes at scale.

Premise: a buffered write costs the kernel a copy into the page cache and the cache's pages,
CPU the writing process pays. ``open(2)`` describes ``O_DIRECT`` as the way to "minimize cache
effects of the I/O to and from this file": the device reads the process's buffer itself, and
the gigabytes written do not push the rest of the machine's cache out. What the saving is
depends on where it runs:

- On a virtual machine whose freed memory goes back to its host (free page reporting or a
  balloon; the 2-core machine the project is developed on behaves so), each page the cache takes
  is touched for the first time again, at the host's cost: ``dd`` of 3.35 GB took 10.4 s of
  system CPU buffered, 3.4 s and 1.4 s when repeated at once (the same memory, not yet given
  back), 0.5 s with ``oflag=direct``.
  ``bench/report_scale.py --floor`` times a buffered and a direct write of the lines' size.
- Where memory stays with the machine, the cache costs about that last 0.4 s a GB, and the saving
  is that much.
- Wall time follows the device: a direct write waits for it (the caller keeps it off the thread
  that makes the lines), so a disk slower than the lines are made becomes the bound, where a
  buffered write would have returned at once while memory lasted.
- The cost moves to the next reader: the file is not left in memory, so a later command over it
  (``orbench-leaderboard``) reads it from the device. Here that first read of 3.35 GB took 8.2 s
  of system CPU, against 0.6 s for a file still cached.

Its conditions, from ``open(2)``: the buffer's address, the length and the file offset of each
write are multiples of the device's logical block size (4,096 covers the usual 512 and 4,096),
so the bytes are gathered in one page-aligned buffer and written a full buffer at a time; the
last part, shorter than a block, is written after ``O_DIRECT`` is turned off again. Where the
platform has no ``O_DIRECT`` (macOS, Windows) or the file system refuses it (``EINVAL``: tmpfs
before Linux 6.6, some network file systems), the same bytes go through the page cache.
"""

from __future__ import annotations

import errno
import mmap
import os

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

#: A multiple of every logical block size in use (512 and 4,096 bytes).
BLOCK = 4096
#: The aligned buffer: a multiple of BLOCK, large enough that a write is one device request.
BUFFER = 16 * 2**20
_DIRECT = getattr(os, "O_DIRECT", 0)


class DirectWriter:
    """Bytes to an open file descriptor (at offset 0, opened for writing), past the page cache
    where the platform and file system allow. ``write`` then ``close``; the descriptor stays open."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.used = fd, mmap.mmap(-1, BUFFER), 0
        self.direct = _set_direct(fd, True)

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        while len(view):
            n = min(len(view), BUFFER - self.used)
            self.buffer[self.used:self.used + n] = view[:n]
            self.used, view = self.used + n, view[n:]
            if self.used == BUFFER:
                self._flush(BUFFER)

    def close(self) -> None:
        """Write what is left: its whole blocks directly, the rest through the page cache."""
        whole = self.used - self.used % BLOCK
        if whole:
            self._flush(whole)
        if self.direct:
            self._buffered()
        with memoryview(self.buffer) as view:
            self._write_all(view[:self.used])
        self.used = 0
        self.buffer.close()

    def _flush(self, n: int) -> None:
        """Write the buffer's first ``n`` bytes (whole blocks) and keep the rest at its start."""
        with memoryview(self.buffer) as view:
            self._write_all(view[:n])
        rest = self.used - n
        self.buffer.move(0, n, rest)
        self.used = rest

    def _write_all(self, view: memoryview) -> None:
        while len(view):
            try:
                done = os.write(self.fd, view)
            except OSError as error:
                if not (self.direct and error.errno == errno.EINVAL):
                    raise
                self._buffered()  # the file system refuses direct writes: nothing was written
                continue
            view = view[done:]
            if len(view) and self.direct:  # a short write leaves the offset unaligned
                self._buffered()

    def _buffered(self) -> None:
        if not _set_direct(self.fd, False):
            raise OSError(errno.EINVAL, "O_DIRECT could not be turned off")
        self.direct = False


def _set_direct(fd: int, on: bool) -> bool:
    """Turn ``O_DIRECT`` on or off for ``fd``; whether that was done."""
    if not _DIRECT or fcntl is None:
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | _DIRECT if on else flags & ~_DIRECT)
    except OSError:
        return False
    return True
