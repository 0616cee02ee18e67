"""Small text-carrying samples shared by the inspect tests (library and CLI)."""
from __future__ import annotations

from pathlib import Path

import orjson


def sample(index, group, rid=None, reward=1.0, rl=3, mask=None, status="completed", **extra) -> dict:
    d = {
        "group_index": group, "index": index, "rollout_id": rid, "prompt": f"prompt {group}", "tokens": list(range(100, 105 + rl)),
        "response": f"response {index}", "response_length": rl, "label": "x", "reward": reward,
        "loss_mask": [1] * rl if mask is None else mask, "status": status, "metadata": {},
    }
    d.update(extra)
    return d


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path
