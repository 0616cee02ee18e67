"""rollout_cli.core.slime_keys: slime's train_data and train-dump key names, named once."""
from __future__ import annotations

import ast
from pathlib import Path

from rollout_cli.core import slime_keys as K
from rollout_cli.core.schema import SLIME_KEYS, train_schema

PKG = Path(K.__file__).resolve().parents[1]
# the modules that build or read slime's dicts
USERS = ["slime/plugin.py", "loader/slime.py", "inputs/train_pt/reader.py", "inputs/nemo_rl/reader.py",
         "inputs/nemo_rl/mapping.py", "inputs/slime_pt/reader.py", "auditing/step.py", "auditing/diff.py",
         "auditing/train_side.py", "auditing/loss_side.py", "auditing/rules.py"]
# keys that are no train-row column's name (so a literal of one in code is a slime key)
SLIME_ONLY = {K.RESPONSE_LENGTHS, K.REWARDS, K.SAMPLE_INDICES, K.ROLLOUT_IDS, K.LOSS_MASKS, K.ROLLOUT_MASK_SUMS,
              K.SOURCE_NAMES, K.TOTAL_LENGTHS, K.FORMAT_VERSION, K.DP_SHARDS, K.LOG_PROBS, K.REF_LOG_PROBS}


def test_the_schema_maps_columns_to_these_keys():
    assert SLIME_KEYS is K.BY_COLUMN
    assert set(K.BY_COLUMN) <= set(train_schema().names)
    assert K.BY_COLUMN["rollout_mask_sum"] == "rollout_mask_sums" and K.BY_COLUMN["loss_mask"] == "loss_masks"
    assert len(set(K.BY_COLUMN.values())) == len(K.BY_COLUMN)


def _literals(path: Path, function: str | None = None) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    scope = tree if function is None else next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function)
    return [(n.lineno, n.value) for n in ast.walk(scope)
            if isinstance(n, ast.Constant) and n.value in SLIME_ONLY and id(n) not in docs]


def test_no_module_types_out_a_slime_key():
    found = []
    for rel in USERS:
        # the loader's batch has attributes named after slime's keys: only its dict builders count
        fns = ["train_data", "_with_schedule"] if rel == "loader/slime.py" else [None]
        found += [f"{rel}: {v}" for fn in fns for _, v in _literals(PKG / rel, fn)]
    assert found == ["inputs/nemo_rl/mapping.py: rewards"]  # NeMo-RL's own log key, read there


def test_the_check_finds_a_typed_out_key(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""Doc: loss_masks."""\nd = {"response_lengths": 1}\n')
    assert _literals(p) == [(2, "response_lengths")]
