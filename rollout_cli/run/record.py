"""What a run records: the manifest of the steps it converted (inputs, steps, counts, the
shards' places in a generation) and rejects.jsonl, built from the steps' results."""
from __future__ import annotations

import time

import orjson

from ..core import hashing, layout, storage
from ..core.options import ConvertOptions
from ..output import manifest as manifest_mod
from .resume import prev_fp
from .tasks import UnitResult


def write_rejects(staging, results: list[UnitResult]) -> dict | None:
    """Every step's rejected samples into rejects.jsonl (synced); its manifest entry, or None."""
    rejects = [r for res in results for r in res.rejects]
    if not rejects:
        return None
    data = b"".join(orjson.dumps(r) + b"\n" for r in rejects)
    storage.write_durable(staging.path(layout.REJECTS), data)
    return {"path": layout.in_generation(getattr(staging, "generation", None), layout.REJECTS), "count": len(rejects),
            "blake3": hashing.bytes_digest(data)}


def _inputs_info(results: list[UnitResult], fingerprints: dict[str, dict], prev: dict | None) -> tuple[list[dict], dict[str, int]]:
    """The manifest's inputs, and their modification times (kept apart from the reproducible
    fields: time stamps change with copies)."""
    inputs, mtimes = [], {}
    for res in results:
        fp = dict(fingerprints.get(res.input.path) or (prev_fp(prev, res.input.display) if prev else {}))
        if "mtime_ns" in fp:
            mtimes[res.input.display] = fp.pop("mtime_ns")
        inputs.append(dict({"path": res.input.display, "format": res.input.format, "split": res.split, "step": res.step,
                            "samples": res.samples}, **fp))
    return inputs, mtimes


def _step_info(res: UnitResult) -> dict:
    return {
        "split": res.split,
        "step": res.step,
        "input": res.input.display,
        "samples": res.samples,
        "rows": res.rows,
        "rejected": res.rejected,
        "rollouts": res.rollouts,
        "tokens": res.tokens,
        "tokens_per_shard": res.tokens_per_shard,
        "imbalance": res.imbalance,
        **res.denominators,
        "shards": res.shards,
        **({"schedule": res.schedule, "dropped": res.schedule["dropped_samples"]} if res.schedule else {}),
        **({"input_missing": True} if res.input.step_from == "missing" else {}),
        **({"not_token_exact": res.not_token_exact} if res.not_token_exact else {}),
    }


def _counts(results: list[UnitResult], schedule: str | None) -> dict:
    counts = {
        "input_samples": sum(r.samples for r in results),
        "rows": sum(r.rows for r in results),
        "rejected": sum(r.rejected for r in results),
        "steps": sum(1 for r in results if r.split == "train"),
        "eval_steps": sum(1 for r in results if r.split == "eval"),
        # rows whose tokens are a text dump tokenized by --tokenizer, not the ids sampled
        "not_token_exact": sum(r.not_token_exact for r in results),
    }
    if schedule == "slime":  # samples slime's trainer would drop (in no shard; see steps[].schedule)
        counts["dropped"] = sum(r.schedule["dropped_samples"] for r in results if r.schedule)
    return counts


def build_manifest(results: list[UnitResult], opts: ConvertOptions, recorded: dict, prev: dict | None,
              fingerprints: dict[str, dict], rejects: dict | None, t0: float, generation: str | None = None,
              pending: list[dict] | None = None) -> dict:
    inputs, mtimes = _inputs_info(results, fingerprints, prev)
    steps = [_step_info(res) for res in results]
    if generation:
        for st in steps:
            st["shards"] = [_in_generation(sh, generation) for sh in st["shards"]]
    return manifest_mod.build(
        tokenizer=_tokenizer_info(opts),
        generation=generation,
        options=recorded,
        inputs=inputs,
        steps=steps,
        counts=_counts(results, opts.schedule),
        rejects=rejects,
        anomalies=[a for r in results for a in r.anomalies],
        pending=pending,
        volatile={"created_unix": round(t0, 3), "seconds": round(time.time() - t0, 3), "input_mtime_ns": mtimes},
    )


def _tokenizer_info(opts: ConvertOptions) -> dict | None:
    """The tokenizer a run tokenized text dumps with: its file and digest (None: none given)."""
    if not opts.tokenizer:
        return None
    from ..text.tokenizer import file_digest, resolve

    return {"path": resolve(opts.tokenizer), "blake3": file_digest(opts.tokenizer)}


def _in_generation(shard: dict, generation: str) -> dict:
    """A shard's manifest entry with its files' paths inside OUT on an object store: in this
    run's generation, or the earlier one a step reused by --resume was written in."""
    def place(rel: str) -> str:
        return rel if layout.split_generation(rel)[0] is not None else layout.in_generation(generation, rel)

    shard = dict(shard, path=place(shard["path"]))
    if shard.get("mmap"):
        shard["mmap"] = dict(shard["mmap"], path=place(shard["mmap"]["path"]))
    return shard

