"""The case ids of a streamed registration, kept as hashes: a repeat is told from two ids of
one hash by the ids themselves."""

from __future__ import annotations

import pytest

from caseshelf.services.registry import IdLog, SeenIds

pytestmark = pytest.mark.integration


def test_two_ids_of_one_hash_are_not_a_repeat() -> None:
    # Given a key under which every id collides, and the ids taken so far as the store has them
    seen = SeenIds(key=lambda case_id: 7)
    stored = ["a", "b", "c", "d"]
    # Then distinct ids pass, within a batch and across batches
    assert seen.first_repeat(["a", "b"], stored.__getitem__) is None
    assert seen.first_repeat(["c"], stored.__getitem__) is None
    # And a repeat names the earlier position, its own and the id
    assert seen.first_repeat(["d", "b"], stored.__getitem__) == (1, 4, "b")


def test_a_repeat_within_one_batch_is_found_without_reading_back() -> None:
    # Given ids never read back (the earlier one is in the same batch)
    def nothing(position: int) -> str:
        raise AssertionError(f"read back {position}")

    seen = SeenIds()
    assert seen.first_repeat(["x", "y"], nothing) is None
    # Then a repeat within the next batch is named by its positions
    assert seen.first_repeat(["z", "w", "z"], nothing) == (2, 4, "z")


def test_a_validation_reads_an_earlier_id_back_from_its_log() -> None:
    # Given a stream that stores nothing, its ids kept a batch to a string, and a key under
    # which every id collides (every batch after the first reads ids back)
    seen, log = SeenIds(key=lambda case_id: 7), IdLog()
    for batch in (["a", "b"], [], ["c"], ["d", "e", "f"]):
        assert seen.first_repeat(batch, log.case_id) is None
        log.add(batch)
    assert [log.case_id(i) for i in range(6)] == ["a", "b", "c", "d", "e", "f"]
    # Then a repeat of an id three batches back is named by its positions
    assert seen.first_repeat(["g", "c"], log.case_id) == (2, 7, "c")
    with pytest.raises(IndexError):
        log.case_id(6)
