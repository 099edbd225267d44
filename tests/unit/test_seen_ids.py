"""The case ids of a streamed registration, kept as hashes: a repeat is told from two ids of
one hash by the ids themselves."""

from __future__ import annotations

import pytest

from caseshelf.services.registry import SeenIds

pytestmark = pytest.mark.unit


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
