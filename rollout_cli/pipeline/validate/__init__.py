"""Stage 2: validate and coerce samples into columnar Arrow batches.

`normalize_chunk` is the entry: every chunk, in the reader contract's columnar form, goes
through the column engine (columns.py, with lists.py for the long numeric lists), which checks
whole chunks and sends a row that fails to the rules for one record (rows.py); those word each
problem (file, line/row/position, the field, expected vs got) and give it its rule id. The
types handed on (NormChunk, the pre-schema) are in batch.py.

Imports run one way: batch -> rows -> lists -> columns -> this entry point.
"""
from __future__ import annotations

from ...inputs.base import RawChunk
from .batch import (ID_EXPLICIT, ID_INVALID, ID_MISSING, MAX_BATCH_VALUES, PRE_FIELDS, TEXT_PRE_FIELDS, NormChunk,
                    pre_schema)
from .rows import parse_rollout_id, select_reward

__all__ = [
    "ID_EXPLICIT", "ID_INVALID", "ID_MISSING", "MAX_BATCH_VALUES", "PRE_FIELDS", "TEXT_PRE_FIELDS", "NormChunk",
    "normalize_chunk", "parse_rollout_id", "pre_schema", "select_reward",
]


def normalize_chunk(chunk: RawChunk, base_pos: int, *, reward_key: str | None, keep_text: bool,
                    step: int | None = None, rewards_recorded: bool = True,
                    images: tuple[int, int] | None = None) -> NormChunk:
    """Validate one chunk; `base_pos` is the position of its first record in the unit. With
    `step`, a record's own `step` field must be that step. `rewards_recorded`: the input
    format's (inputs/format.Format.rewards_recorded); False lets a record's reward be None.
    `images`: (image token id, spatial merge size), the image placeholder rule's settings."""
    from ...inputs.columns import columnar
    from .columns import normalize_columns

    nc = normalize_columns(columnar(chunk), base_pos, reward_key=reward_key, keep_text=keep_text, step=step,
                           rewards_recorded=rewards_recorded)
    if images is not None:  # (--image-token-id, --spatial-merge-size): pipeline/validate/images.py
        from .images import check_images

        nc = check_images(nc, chunk, base_pos, *images)
    return nc
