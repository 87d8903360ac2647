"""`fleetwatch export` sorts a range bigger than memory (streaming/ops/spill.py): past its buffer the
events go to sorted run files on disk, and the merge gives exactly the order of one in-memory sort."""

from __future__ import annotations

import random

import pytest

from streaming.ops.spill import SortedSpill


def test_past_its_buffer_the_spill_sorts_on_disk_exactly_as_one_sort_in_memory(tmp_path):
    rng = random.Random(30)
    items = [(rng.randrange(1_764_000_000_000, 1_764_000_060_000), rng.randrange(4), rng.randrange(3), n,
              bytes(rng.randrange(256) for _ in range(rng.randrange(0, 40))))  # any byte, newlines and NULs too
             for n in range(2_000)]
    spill = SortedSpill(buffer_events=300, workdir=tmp_path)
    for item in items:
        spill.add(item)
    assert spill.runs == 6 and spill.count == 2_000  # 6 full buffers on disk, 200 still in memory
    assert list(spill.drain()) == sorted(items, key=lambda item: item[:4])
    assert list(tmp_path.iterdir()) == []  # the run files are gone


def test_an_empty_spill_drains_to_nothing_and_a_buffer_needs_room(tmp_path):
    assert list(SortedSpill(workdir=tmp_path).drain()) == []
    with pytest.raises(ValueError):
        SortedSpill(buffer_events=0)
