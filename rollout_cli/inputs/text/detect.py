"""A generic text dump, claimed by its first record (JSONL) or columns (Parquet, CSV): `prompt`
and `completion` text and a `reward` or `score`, no `tokens`. The reward is `reward` (else
`score`); the group is `group` (else `group_index`) where present, else the rows of a step with
the same prompt; every other key goes to metadata."""
from __future__ import annotations

from ..textdump import TextRecord, first_record, group_key, number_field, table_columns, text_field, text_record_keys

_REWARDS = ("reward", "score")
_GROUPS = ("group", "group_index")
_OWN = ("prompt", "completion", "step", *_REWARDS, *_GROUPS)


def claims(path: str) -> bool:
    rec = first_record(path)
    keys = list(rec) if rec is not None else table_columns(path)
    return keys is not None and text_record_keys(keys, "prompt", "completion", _REWARDS)


def step_and_split(path: str) -> tuple[int, str] | None:
    return None


def record(rec: dict) -> TextRecord:
    rkey = "reward" if "reward" in rec else "score"
    gkey = next((k for k in _GROUPS if rec.get(k) is not None), None)
    md = {k: v for k, v in rec.items() if k not in _OWN}
    return TextRecord(text_field(rec, "prompt"), text_field(rec, "completion"), number_field(rec, rkey),
                      rec.get("step"), group_key(rec[gkey], gkey) if gkey else None, md or None)


def read(inp, request, info):
    from ..textdump import read as read_text

    return read_text(inp, request, info, record, "text.record")
