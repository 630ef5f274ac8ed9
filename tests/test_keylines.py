"""Where keys lie in a dump file, read in chunks: the lines one search of the whole text finds, whatever the chunk;
the readers that go back to a dump file after its load do not wait on a FIFO put in its place."""

from __future__ import annotations

import json
import os
import random
import threading
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.dumps import keylines
from rca_lsp.dumps.keylines import find_lines, quoted_key
from rca_lsp.dumps.rankfile import read_raw_entries
from rca_lsp.dumps.tensorfile import hashes_in


def lines_in_whole_text(data: bytes, keys: list[str]) -> list[int | None]:
    """The oracle: the text searched as one, in the given order, a key out of order searched from the start."""
    lines: list[int | None] = []
    offset = line = 0
    for key in keys:
        found = data.find(quoted_key(key), offset)
        if found < 0:
            found = data.find(quoted_key(key))
            if found < 0:
                lines.append(None)
                continue
            offset = line = 0
        line += data.count(b"\n", offset, found)
        offset = found
        lines.append(line)
    return lines


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 22])
@pytest.mark.parametrize("seed", range(8))
def test_the_lines_are_those_of_the_whole_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int, seed: int
) -> None:
    """Keys in dump order, out of it, absent, repeated, longer than a chunk, on `\\r\\n` lines: as the oracle."""
    monkeypatch.setattr(keylines, "_CHUNK", chunk)
    rng = random.Random(seed)
    path = next((FIXTURES / "vllm_healthy" / "rollout").glob("**/dump.json"))
    text = path.read_bytes()
    if seed % 2:
        text = text.replace(b"\n", b"\r\n")
    dump = tmp_path / "dump.json"
    dump.write_bytes(text)
    keys = list(json.loads(text)["data"])
    wanted = sorted(rng.sample(keys, 12), key=keys.index)  # dump order, as the server asks
    wanted.insert(rng.randrange(len(wanted)), rng.choice(keys))  # one out of order (or repeated)
    wanted.insert(rng.randrange(len(wanted)), "Module.not.in.this.dump.forward.0")
    wanted.append("x" * 300)  # longer than the small chunks
    assert find_lines(str(dump), wanted) == lines_in_whole_text(text, wanted)


def test_a_file_that_cannot_be_read_has_no_lines(tmp_path: Path) -> None:
    assert find_lines(str(tmp_path / "gone.json"), ["a", "b"]) == [None, None]


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 8, 13])
def test_a_key_that_repeats_is_found_after_the_one_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """Each search starts where the last one found its key, also across the chunks' seams: a later copy of a key
    is found, not its first (as a search of the whole text from the start would)."""
    monkeypatch.setattr(keylines, "_CHUNK", chunk)
    rng = random.Random(chunk)
    names = ["a", "bb", "ccc", "dddd"]
    text_lines = [f'{" " * rng.randrange(3)}"{rng.choice(names)}": {i},' for i in range(200)]
    text = "\n".join(text_lines).encode()
    dump = tmp_path / "dump.json"
    dump.write_bytes(text)
    wanted = [rng.choice(names) for _ in range(60)]
    found = find_lines(str(dump), wanted)
    assert found == lines_in_whole_text(text, wanted)
    assert found != lines_in_whole_text(text, wanted[:1]) * len(wanted)  # later copies were found


@pytest.mark.parametrize("reader", ["key lines", "raw entries", "md5 mode"])
def test_a_fifo_put_in_place_of_a_dump_is_not_waited_on(tmp_path: Path, reader: str) -> None:
    """The readers that go back to a dump file after its load (the server's locations and hovers, the tensor modes'
    sniff) find nothing in a FIFO now lying at its path, at once: opening one for reading waits for a writer."""
    fifo = tmp_path / "dump.json"
    os.mkfifo(fifo)
    read = {
        "key lines": lambda: find_lines(str(fifo), ["a"]),
        "raw entries": lambda: read_raw_entries(fifo, ["a"]),
        "md5 mode": lambda: hashes_in(str(fifo)),
    }[reader]
    answer: list[object] = []
    worker = threading.Thread(target=lambda: answer.append(read()), daemon=True)
    worker.start()
    worker.join(timeout=30)
    if worker.is_alive():  # free the reader still waiting on the FIFO
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("the reader waits for a writer of the FIFO")
    assert answer == [{"key lines": [None], "raw entries": {"a": None}, "md5 mode": False}[reader]]
