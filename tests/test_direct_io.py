"""The writer past the page cache (orbench.run.direct_io): the file holds exactly the bytes given,
in order, whatever the sizes of the pieces and of the whole, around its block and buffer sizes."""

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
