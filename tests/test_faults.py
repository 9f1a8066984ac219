"""Runs you can trust after a crash: each test reproduces one reported fault and fails without its fix.

LLM teacher transport (against hostile HTTP servers on 127.0.0.1, never the network), atomic and
crash-tolerant files, a linear-time tag parser, and ALFWorld data paths that cannot escape their root.
"""

from __future__ import annotations

import json
import os
import re
import threading
import tracemalloc

import pytest

from rlvmr_nb.evaluate import write_results
from rlvmr_nb.trajectory import Episode, Step, append_episodes, iter_episodes, read_episodes, write_episodes


# ------------------------------------------------------------------------------------ atomic writes


def test_write_results_never_shows_readers_a_partial_file(tmp_path):
    path = tmp_path / "results.json"
    big = {"per_task": {f"task-{i}": {"success": i % 2, "notes": "x" * 200} for i in range(3000)}}  # ~0.7 MB
    write_results(path, {"success": 0.5}, {"seed": 0}, extra=big)
    stop, failures, reads = threading.Event(), [], [0]

    def read_loop() -> None:
        while not stop.is_set():
            try:
                json.loads(path.read_text())
            except ValueError as e:
                failures.append(e)
            reads[0] += 1

    readers = [threading.Thread(target=read_loop) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for i in range(40):
            write_results(path, {"success": i / 40}, {"seed": i}, extra=big)
    finally:
        stop.set()
        for r in readers:
            r.join()
    assert reads[0] > 0 and failures == []
    assert json.loads(path.read_text())["config"] == {"seed": 39}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]  # no temporary file left behind
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's private 0o600


def _episodes(prefix: str, n: int, pad: int = 0) -> list[Episode]:
    return [Episode(task_id=f"{prefix}{i}", env="toy", episode_id=f"{prefix}{i}",
                    steps=[Step(t=0, observation="o" * pad, action="a")]) for i in range(n)]


def test_two_writers_of_one_path_do_not_share_a_temp_file(tmp_path):
    path = tmp_path / "e.jsonl"
    outer, inner = _episodes("outer", 3), _episodes("inner", 2)

    def outer_stream():  # a second writer of the same path runs while the first is mid-file
        yield outer[0]
        write_episodes(path, inner)
        yield from outer[1:]

    assert write_episodes(path, outer_stream()) == 3
    assert [e.episode_id for e in read_episodes(path)] == ["outer0", "outer1", "outer2"]
    assert [p.name for p in tmp_path.iterdir()] == ["e.jsonl"]


def test_iter_episodes_streams_instead_of_reading_the_whole_file(tmp_path):
    path = tmp_path / "big.jsonl"
    write_episodes(path, _episodes("e", 400, pad=25_000))  # ~10 MB
    size = path.stat().st_size
    tracemalloc.start()
    try:
        n = sum(1 for _ in iter_episodes(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == 400 and peak < size / 4, f"peak {peak} bytes for a {size}-byte file"


def test_append_repairs_a_torn_tail_before_appending(tmp_path):
    path = tmp_path / "episodes.jsonl"
    append_episodes(path, _episodes("a", 2))
    with open(path, "ab") as f:
        f.write('{"task_id": "torn", "env": "toy", "info": {"note": "好'.encode()[:-1])  # cut mid-character
    assert [e.episode_id for e in read_episodes(path)] == ["a0", "a1"]  # readers skip a torn final line
    with pytest.warns(UserWarning, match="incomplete last line"):
        append_episodes(path, _episodes("b", 2))
    assert [e.episode_id for e in read_episodes(path)] == ["a0", "a1", "b0", "b1"]
    assert path.read_bytes().endswith(b"\n") and b"torn" not in path.read_bytes()


def test_append_keeps_a_complete_last_record_that_only_lacks_its_newline(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(_episodes("a", 1)[0].to_dict()))  # written by a tool that adds no final newline
    assert [e.episode_id for e in read_episodes(path)] == ["a0"]
    append_episodes(path, _episodes("b", 1))
    assert [e.episode_id for e in read_episodes(path)] == ["a0", "b0"]


def test_only_the_final_unterminated_line_is_forgiven(tmp_path):
    path = tmp_path / "episodes.jsonl"
    good = json.dumps(_episodes("a", 1)[0].to_dict())
    path.write_text(f"{good}\n{{broken\n{good}\n")
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}: line 2 is not valid JSON"):
        read_episodes(path)
    path.write_text(f"{good}\n{{complete but corrupt}}\n")  # has its newline: not a torn write
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_episodes(path)
    path.write_text(f"{good}\n{'[' * 100_000}\n{good}\n")  # nesting too deep is a bad line, not a crash
    with pytest.raises(ValueError, match="line 2 is not valid JSON"):
        read_episodes(path)
