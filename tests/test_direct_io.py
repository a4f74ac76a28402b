"""The writer past the page cache (orbench.run.direct_io): the file holds exactly the bytes given,
in order, whatever the sizes of the pieces and of the whole, around its block and buffer sizes; and
when the file system refuses a direct write or writes part of one, the rest goes through the page cache."""

import os
import random

import pytest

from orbench.run.direct_io import BLOCK, BUFFER, DirectWriter


@pytest.mark.parametrize("total", [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, BUFFER - 1, BUFFER, BUFFER + BLOCK + 7,
                                   2 * BUFFER + 123])
def test_the_file_holds_the_bytes_written_in_order(tmp_path, total):
    data = random.Random(total).randbytes(total)
    pieces, at, rng = [], 0, random.Random(1)
    while at < total:
        n = rng.choice([1, 7, BLOCK, 1000, 3 * 2**20])
        pieces.append(memoryview(data)[at:at + n])
        at += n
    path = tmp_path / "out.bin"
    with open(path, "wb", buffering=0) as handle:
        sink = DirectWriter(handle.fileno())
        for piece in pieces:
            sink.write(piece)
        sink.close()
    assert path.read_bytes() == data


def test_the_descriptor_stays_open_and_bytes_and_bytearrays_are_taken(tmp_path):
    path = tmp_path / "out.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    sink = DirectWriter(fd)
    sink.write(b"abc")
    sink.write(bytearray(b"x" * BUFFER))
    sink.close()
    os.write(fd, b"!")  # still open, at the end of what was written
    os.close(fd)
    assert path.read_bytes() == b"abc" + b"x" * BUFFER + b"!"


def _direct_flag(fd: int) -> bool:
    fcntl = pytest.importorskip("fcntl")
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))


def _writes_to(monkeypatch, fd: int, answer):
    """os.write on ``fd`` answered by ``answer(view, real_write, direct_now)``: what a file system that
    refuses direct writes, or writes part of one, does (the system call is the boundary faked)."""
    real = os.write

    def write(target, data):
        if target != fd:
            return real(target, data)
        return answer(memoryview(data), real, _direct_flag(fd))

    monkeypatch.setattr(os, "write", write)


@pytest.mark.skipif(not getattr(os, "O_DIRECT", 0), reason="no O_DIRECT on this platform")
def test_a_file_system_that_refuses_direct_writes_gets_the_bytes_through_the_page_cache(tmp_path, monkeypatch):
    data = random.Random(5).randbytes(BUFFER + 3 * BLOCK + 11)
    path = tmp_path / "out.bin"
    refused = []

    def answer(view, real, direct):
        if direct:  # EINVAL, as tmpfs before Linux 6.6: nothing written
            refused.append(len(view))
            raise OSError(22, "Invalid argument")
        return real(fd, view)

    with open(path, "wb", buffering=0) as handle:
        fd = handle.fileno()
        sink = DirectWriter(fd)
        assert sink.direct and _direct_flag(fd)
        _writes_to(monkeypatch, fd, answer)
        sink.write(data[:100])
        sink.write(data[100:])
        sink.close()
        assert not sink.direct and not _direct_flag(fd)
    assert refused == [BUFFER]  # refused once, then every byte went buffered
    assert path.read_bytes() == data


@pytest.mark.skipif(not getattr(os, "O_DIRECT", 0), reason="no O_DIRECT on this platform")
def test_a_short_direct_write_goes_on_buffered_from_where_it_stopped(tmp_path, monkeypatch):
    data = random.Random(6).randbytes(2 * BUFFER + BLOCK + 5)
    path = tmp_path / "out.bin"
    calls = []

    def answer(view, real, direct):
        calls.append((len(view), direct))
        if direct:  # a short write of one block: the offset is still aligned, but the rest is not sent
            return real(fd, view[:BLOCK])
        return real(fd, view[:len(view) // 2 + 1])  # buffered writes may be short too

    with open(path, "wb", buffering=0) as handle:
        fd = handle.fileno()
        sink = DirectWriter(fd)
        _writes_to(monkeypatch, fd, answer)
        for at in range(0, len(data), 3 * 2**20):
            sink.write(data[at:at + 3 * 2**20])
        sink.close()
    assert calls[0] == (BUFFER, True) and all(not direct for _, direct in calls[1:])
    assert path.read_bytes() == data


def test_another_error_is_raised_and_not_taken_for_a_refusal(tmp_path, monkeypatch):
    path = tmp_path / "out.bin"

    def answer(view, real, direct):
        raise OSError(28, "No space left on device")

    with open(path, "wb", buffering=0) as handle:
        fd = handle.fileno()
        sink = DirectWriter(fd)
        _writes_to(monkeypatch, fd, answer)
        with pytest.raises(OSError, match="No space left"):
            sink.write(b"x" * BUFFER)
