"""Hugging Face dataset cards: a `README.md` whose YAML header's `configs` says which files form
which split, so `datasets.load_dataset(folder)` reads the folder with no other argument (the
Hub's "manual configuration": `configs[].data_files[]` as `{split, path}`, `path` a glob or a
list of them, relative to the card). Deterministic bytes: the same arguments give the same card.

`render` writes any folder's card; `output_card` is the card of a converted output, made from
its manifest."""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from ..core import hashing, layout

# The split names `datasets` gives an output's splits (the Hub's names: eval rows are validation).
HF_SPLITS = {"train": "train", "eval": "validation"}


def _scalar(v) -> str:
    """A YAML scalar: JSON's double-quoted string or number is valid YAML with the same value."""
    return json.dumps(v, ensure_ascii=False)


# Arrow types as the `datasets` library names them in a card's `dataset_info.features`
_DTYPES = {"int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint8": "uint8",
           "uint16": "uint16", "uint32": "uint32", "uint64": "uint64", "float": "float32",
           "double": "float64", "halffloat": "float16", "bool": "bool", "string": "string",
           "large_string": "large_string"}


def _feature(t, indent: str) -> list[str]:
    """The YAML lines (after `name:`) declaring one column's type: `dtype` for a scalar, `list`
    of a type or of fields, a struct's fields as `struct`."""
    import pyarrow as pa

    from ..core.tensors import IMAGE

    if t == IMAGE:  # PNG bytes as Hugging Face's Image feature lays them out
        return [f"{indent}dtype: image"]
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and t.value_type == IMAGE:
        return [f"{indent}list: image"]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        inner = t.value_type
        if pa.types.is_struct(inner):
            return [f"{indent}list:"] + _fields(inner, indent)
        if pa.types.is_list(inner) or pa.types.is_large_list(inner):
            return [f"{indent}list:"] + _feature(inner, indent + "  ")
        return [f"{indent}list: {_DTYPES[str(inner)]}"]
    if pa.types.is_struct(t):
        return [f"{indent}struct:"] + _fields(t, indent)
    return [f"{indent}dtype: {_DTYPES[str(t)]}"]


def _fields(t, indent: str) -> list[str]:
    lines = []
    for f in t:
        lines.append(f"{indent}- name: {_scalar(f.name)}")
        lines.extend(_feature(f.type, indent + "  "))
    return lines


def render(splits: Mapping[str, Sequence[str]], *, title: str, body: str = "",
           features: Sequence[tuple[str, str]] = (), config_name: str = "default", schema=None) -> bytes:
    """A dataset card: `splits` maps each split name to its files (globs relative to the
    card's folder, in order); `features` (column name, type in words) are listed in the body,
    after `body` (Markdown). Only splits with files are declared. With `schema` (a pyarrow
    schema of those files) the header declares the config's features too (`dataset_info`), as
    the Hub shows and `datasets` reads them."""
    yaml = ["---"]
    if schema is not None:
        yaml += ["dataset_info:", f"  config_name: {_scalar(config_name)}", "  features:"]
        yaml += _fields(schema, "  ")
    yaml += ["configs:", f"- config_name: {_scalar(config_name)}", "  data_files:"]
    for split, paths in splits.items():
        if not paths:
            continue
        yaml.append(f"  - split: {_scalar(split)}")
        if len(paths) == 1:
            yaml.append(f"    path: {_scalar(paths[0])}")
        else:
            yaml.append("    path:")
            yaml.extend(f"    - {_scalar(p)}" for p in paths)
    yaml.append("---")
    text = "\n".join(yaml) + f"\n\n# {title}\n"
    if body:
        text += "\n" + body.rstrip("\n") + "\n"
    if features:
        text += "\n## Columns\n\n| column | type |\n| --- | --- |\n"
        text += "".join(f"| `{name}` | `{kind}` |\n" for name, kind in features)
    return text.encode()


def output_splits(m: Mapping) -> dict[str, list[str]]:
    """The files of each split of the output the manifest `m` describes, as the card's globs:
    `data/**/*.parquet` and `eval/**/*.parquet` (only for a split with steps); on an object store
    one glob per generation folder holding the split's shards, so no uncommitted file matches;
    a split holding an empty shard lists its non-empty shards instead."""
    globs: dict[str, list[str]] = {}
    for split, tree in layout.SPLIT_TREES.items():
        shards = [sh for s in m["steps"] if s["split"] == split for sh in s["shards"]]
        if any(sh.get("rows") == 0 for sh in shards):
            # `datasets` fails on a Parquet file of no rows (a step with fewer rollouts than
            # shards has one): such a split names its other files one by one
            files = [sh["path"] for sh in shards if sh.get("rows") != 0]
            if files:  # a split of no rows at all is left out
                globs[HF_SPLITS[split]] = files
            continue
        gens = sorted({layout.split_generation(sh["path"])[0] or "" for sh in shards})
        globs[HF_SPLITS[split]] = [layout.in_generation(g or None, f"{tree}/**/*.parquet") for g in gens]
    return globs


def _steps(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def output_card(m: Mapping) -> bytes:
    """The card of a converted output, from its manifest (no time stamps, no tool version: two
    conversions of the same input give the same bytes)."""
    from ..core.schema import train_schema

    rows = {split: sum(s["rows"] for s in m["steps"] if s["split"] == split) for split in layout.SPLITS}
    steps = {split: sum(1 for s in m["steps"] if s["split"] == split) for split in layout.SPLITS}
    mmap = any(sh.get("mmap") for s in m["steps"] for sh in s["shards"])
    body = (
        f"Train data converted by rollout-cli (format `{m['format']}`, schema version {m['schema_version']}): "
        f"{rows['train']} train rows in {_steps(steps['train'])}"
        + (f", {rows['eval']} eval rows in {_steps(steps['eval'])} (the `validation` split)" if steps["eval"] else "")
        + ". Every row carries its `step`; `manifest.json` lists every file with its checksum"
        + (", and `mmap/` holds uncompressed Arrow IPC copies of the same shards" if mmap else "") + ".\n\n"
        "```python\nimport datasets\nds = datasets.load_dataset(\"path/to/this/folder\")\n```"
    )
    schema = train_schema(bool((m.get("options") or {}).get("keep_text", False)), m["schema_version"])
    return render(output_splits(m), title="rollout-cli train data", body=body,
                  features=[(f.name, str(f.type)) for f in schema])


def attach(m: dict) -> bytes:
    """The card of the output `m` describes, recorded in `m` (its `card` key: path, size and
    BLAKE3, checked by verify like every other file); the bytes for the commit to write."""
    data = output_card(m)
    m["card"] = {"path": layout.CARD, "bytes": len(data), "blake3": hashing.bytes_digest(data)}
    return data
