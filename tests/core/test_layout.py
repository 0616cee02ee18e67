"""The output layout (core/layout.py): generation folders of object-store outputs."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_cli.core import layout

SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=200)

_paths = st.builds(
    lambda split, step, shards, shard, ipc: (layout.mmap_path if ipc else layout.shard_path)(split, step, shard % shards, shards),
    st.sampled_from(layout.SPLITS), st.integers(0, 10**9), st.integers(1, 10**4), st.integers(0, 10**4), st.booleans(),
)
_generations = st.text("0123456789abcdef", min_size=8, max_size=64)


@settings(**SETTINGS)
@given(_paths, _generations)
def test_generation_paths_round_trip_and_stay_inside_their_tree(rel, generation):
    placed = layout.in_generation(generation, rel)
    assert placed == f"gen/{generation}/{rel}"
    assert layout.split_generation(placed) == (generation, rel)
    assert layout.split_generation(rel) == (None, rel)
    assert layout.in_generation(None, rel) == rel
    top = rel.split("/", 1)[0]
    assert layout.is_safe(placed, (top,)) and layout.is_safe(rel, (top,))
    other = next(t for t in layout.TREES if t != top)
    assert not layout.is_safe(placed, (other,))


@settings(**SETTINGS)
@given(_paths, st.sampled_from(["", "ABCDEF12", "..", "0" * 7, "0" * 65, "g1234567", "01234567/.."]))
def test_a_path_naming_no_valid_generation_is_not_inside_one(rel, bad):
    placed = f"gen/{bad}/{rel}"
    assert not layout.is_safe(placed, (rel.split("/", 1)[0],))
    if "/" not in bad:
        assert layout.split_generation(placed)[0] is None and not layout.is_generation(bad)
