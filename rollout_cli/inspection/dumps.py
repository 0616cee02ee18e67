"""Steps of dumps: each input read and validated, its ids, rejects, rewards and mask sums
computed by the very stage functions `convert` runs (inputs.registry.read_input,
pipeline.validate.normalize_chunk, pipeline.assemble.StepAssembler, with the unit and step rules
of inputs.units), so the rows are the ones convert writes. Invalid samples are not fatal: they
become anomalies and, with their rollouts, are left out, as `convert --on-error skip` does.

Memory: records are validated CHUNK_RECORDS at a time; a step keeps one small row per sample
(about 100 bytes), never token lists.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core.errors import Location, Problem
from ..inputs.discover import InputFile
from ..inputs.registry import format_of, read_input
from ..inputs.units import Unit, claim_step, in_steps, record_step, train_dump_note, unit_step
from ..pipeline.ids import reused_ids
from ..pipeline.assemble import AssembledStep, StepAssembler
from ..pipeline.staleness import STALE_RULE
from ..pipeline.step import StepFields
from ..pipeline.validate import ID_EXPLICIT, NormChunk, normalize_chunk
from ..text.tokenizer import image_rule
from .anomalies import Anomalies, loc_dict, problem_kind, reject_level, row_anomalies
from .lineage import lineage_anomalies
from .options import InspectOptions
from .rows import ROW_SCHEMA, DumpRecords, StepData, dense

# Records parsed at a time. The parsed Python lists of a chunk are the peak of memory (a 1 GB JSONL
# step of 2k-token samples: about 160 MB over the interpreter's baseline at 256, 400 MB at 1024);
# the ids, rewards and positions are the same for any chunk size.
CHUNK_RECORDS = 256
# the staged columns a row summary needs (never tokens or the loss mask itself)
_SMALL_PRE = ["_pos", "sample_index", "group_index", "response_length", "total_length", "_mask_total", "remove_sample",
              "_reward_value", "raw_reward", "truncated", "status", "source_name"]


def read_chunks(inp: InputFile, opts: InspectOptions, payload: dict):
    """The same reader dispatch as convert, in smaller chunks."""
    reading = read_input(inp, trust_pickle=opts.trust_pickle, chunk_records=CHUNK_RECORDS, tokenizer=opts.tokenizer,
                         max_line_bytes=opts.max_line_bytes, max_storage_bytes=opts.max_storage_bytes)
    yield from reading
    payload.update(step=reading.info.step, train_dump=reading.info.train_dump, lines=reading.info.lines)


def validate_chunk(raw, base: int, inp: InputFile, opts: InspectOptions, keep_text: bool) -> NormChunk:
    """convert's validation of one chunk (its record `step` check included)."""
    return normalize_chunk(raw, base, reward_key=opts.reward_key, keep_text=keep_text, step=record_step(inp),
                           rewards_recorded=format_of(inp.format).rewards_recorded, images=image_rule(opts))


def _read(inp: InputFile, opts: InspectOptions, payload: dict) -> StepAssembler:
    """One pass over a dump: per-record summaries and the small staged columns of its rows."""
    asm = StepAssembler.of_input(inp, opts, columns=_SMALL_PRE)
    for raw in read_chunks(inp, opts, payload):
        asm.add(validate_chunk(raw, asm.records, inp, opts, keep_text=False))
    return asm


def dump_step(unit: Unit, opts: InspectOptions, anomalies: Anomalies, seen: dict, notes: list) -> StepData | None:
    """Read, validate and id one dump file as convert does; keep per-sample summaries only.
    None when convert would skip it (a train-side dump, or a step outside --steps)."""
    inp = unit.input
    payload: dict = {}
    asm = _read(inp, opts, payload)
    if payload.get("train_dump"):
        notes.append(train_dump_note(unit))
        return None
    step = unit_step(unit, payload.get("step"))
    if not in_steps(step, opts.steps):
        return None  # a .pt whose payload step (which wins over its name) is not selected
    claim_step(seen, inp.split, step, inp.display)
    st = asm.finish(step, fail=False, unknown_groups_ok=True)
    notes.extend(st.fields.notes)
    _problem_anomalies(st.fields, st.problems, st.where, anomalies, inp.split, step)
    _id_anomalies(st.fields, (st.id_state, st.explicit, st.group_index), st.where, opts, anomalies, inp, step)
    return _kept_step(inp, st, opts, anomalies)


# the rules of a whole parsed sample, whose anomaly names its sample_index and its place in the step
_SAMPLE_RULES = frozenset({"multimodal_train_inputs.missing", "multimodal_train_inputs.placeholders"})


def _problem_anomalies(sf: StepFields, problems: list[tuple[int, Problem]], where: Callable[[int], Location],
                       anomalies: Anomalies, split: str, step: int) -> None:
    """Invalid samples (convert fails on them or, with --on-error skip, rejects their rollouts),
    then the valid samples left out with them."""
    for i, p in problems:
        extra = {"rollout_id": int(sf.ids[i])} if sf.assigned[i] else {}
        if p.sample_index is not None or p.rule in _SAMPLE_RULES:  # a rule of a parsed sample: where it stands
            extra.update(sample_index=p.sample_index, rollout_position=i)
        anomalies.add(problem_kind(p.rule), "error", split, step, f"{p.field}: {p.message}" if p.field else p.message,
                      [loc_dict(p.location)], field=p.field, rule=p.rule, **extra)
    own = {i for i, _ in sf.problems}
    first_bad: dict[int, int] = {}
    for i, _ in sf.problems:
        if sf.assigned[i]:
            first_bad.setdefault(int(sf.ids[i]), i)
    for i in np.flatnonzero(sf.rejected).tolist():
        p = sf.reasons.get(i)
        if i not in own and p is not None and p.rule == STALE_RULE:  # --max-staleness: its rollout, whole
            kind = problem_kind(p.rule)
            anomalies.add(kind, reject_level(kind), split, step, f"{p.field}: {p.message}", [loc_dict(p.location)],
                          field=p.field, rule=p.rule, rollout_id=int(sf.ids[i]))
        elif i not in own:
            j = first_bad[int(sf.ids[i])]
            anomalies.add("rejected_sibling", "info", split, step,
                          f"left out with its rollout {int(sf.ids[i])}: sibling of invalid sample {where(j)}",
                          [loc_dict(where(i))], rollout_id=int(sf.ids[i]))


def _id_anomalies(sf: StepFields, id_in: tuple, where: Callable[[int], Location], opts: InspectOptions,
                  anomalies: Anomalies, inp: InputFile, step: int) -> None:
    """Explicit ids reused across prompt groups (with locations, under every scope), then the
    id rule's own findings."""
    id_state, explicit, group_index = id_in
    split = inp.split
    for v, gs in reused_ids(id_state, explicit, group_index).items():
        members = np.flatnonzero((id_state == ID_EXPLICIT) & (explicit == v)).tolist()
        if opts.rollout_id_scope == "strict":
            level, what = "error", ("convert fails on this under --rollout-id-scope strict (--on-error skip leaves these samples out); "
                                    "--rollout-id-scope step merges them as slime does, group keeps them apart")
        elif opts.rollout_id_scope == "step":
            level, what = "warning", "merged into one rollout (--rollout-id-scope step)"
        else:
            level, what = "warning", "split per prompt group (--rollout-id-scope group)"
        anomalies.add("id_reused_across_groups", level, split, step,
                      f"explicit id {v} is used by {len(members)} samples of prompt groups {gs}: {what}",
                      [loc_dict(where(i)) for i in members[:6]], rollout_id=v, groups=gs, samples=len(members))
    for a in sf.anomalies:
        if a.get("kind") == "id_reused_across_groups":
            continue  # reported above, with locations, for every scope
        anomalies.add_recorded(a, split, step, {"file": inp.display})


def _kept_step(inp: InputFile, st: AssembledStep, opts: InspectOptions, anomalies: Anomalies) -> StepData:
    """The rows convert keeps, with their ids, rewards and mask sums, and their anomalies."""
    split, step, sf, where = inp.split, st.step, st.fields, st.where
    pre = st.kept()
    pos = pre.column("_pos").to_numpy()
    if not sf.groups_known:
        missing = [int(pos[k]) for k, g in enumerate(sf.group_keys) if isinstance(g, tuple)]
        anomalies.add("group_index_missing", "error", split, step,
                      f"{len(missing)} samples have no group_index, so prompt groups are unknown: convert fails; "
                      "pass --n-samples-per-prompt N to group consecutive samples (rewards shown as unknown)",
                      [loc_dict(where(p)) for p in missing[:6]], samples=len(missing))
    m = len(pos)
    rows = pa.Table.from_arrays(
        [
            pa.array(np.full(m, step, dtype=np.int64)),
            pa.array(sf.ids[pos], pa.int64()),
            pre.column("sample_index"),
            pre.column("group_index"),
            pa.array(dense(sf.group_keys), pa.int64()),
            pc.cast(pre.column("response_length"), pa.int64()),
            pc.cast(pre.column("total_length"), pa.int64()),
            pre.column("_mask_total"),
            pre.column("remove_sample"),
            pa.array(sf.rewards, pa.float32(), from_pandas=True),  # NaN (groups unknown) -> null
            pre.column("raw_reward"),
            pre.column("truncated"),
            pre.column("status"),
            pre.column("source_name"),
            pa.array(sf.mask_sums, pa.int64()),
            pa.array(pos, pa.int64()),
            pre.column("weight_versions"),
        ],
        schema=ROW_SCHEMA,
    )
    records = DumpRecords(inp, sf.ids, sf.assigned, sf.rejected, sf.reasons, where)
    sd = StepData(split, step, inp.display, st.records, int(sf.rejected.sum()), rows, groups_known=sf.groups_known,
                  records=records, not_token_exact=rows.num_rows if format_of(inp.format).text_dump else 0,
                  images=st.images, patches=st.patches)
    sd.zero_variance_groups = row_anomalies(sd, lambda i: loc_dict(where(int(pos[i]))), anomalies, opts.n_samples_per_prompt)
    lineage_anomalies(sd, lambda i: loc_dict(where(int(pos[i]))), anomalies)
    return sd


def dump_steps(units: list[Unit], opts: InspectOptions, anomalies: Anomalies, notes: list) -> Iterator[StepData]:
    """The steps of `units`, in order (those convert would skip left out)."""
    seen: dict = {}
    for unit in units:
        sd = dump_step(unit, opts, anomalies, seen, notes)
        if sd is not None:
            yield sd
