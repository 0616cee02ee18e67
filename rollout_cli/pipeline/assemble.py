"""One step, assembled: a step's validated chunks taken in order, then the step finished from
them (content-keyed prompt groups renumbered, ids, rejects, rewards, mask sums and the
denominators, by pipeline.step.compute_step). Every command that computes a step goes through
StepAssembler: convert's finish (over its workers' parts), inspect and report on dumps, audit
and the slime hooks, so they apply the same rules in the same order."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from ..core import tensors
from ..core.errors import Location, Problem
from ..inputs.registry import format_of
from ..text.tokenizer import image_rule
from .records import dense_groups, id_inputs, locator, summary_only
from .staleness import oldest_versions
from .step import StepFields, compute_step
from .validate import NormChunk, pre_schema

# The staged columns finishing a step reads (besides what its caller keeps for itself).
MM = "multimodal_train_inputs"
STEP_COLUMNS = ("_pos", "group_index", "_reward_value", "_mask_total", "weight_versions")


@dataclass
class AssembledStep:
    """A finished step: what compute_step gave, and what it was computed from."""

    split: str
    step: int
    records: int  # parsed records, valid or not
    fields: StepFields
    rows: pa.Table  # every valid row in record order (group_index renumbered for content-keyed formats)
    where: Callable[[int], Location]  # record position -> file:line, file:row or file:sample
    id_state: np.ndarray  # per record: the id rule's inputs
    explicit: np.ndarray
    group_index: list  # per record (renumbered for content-keyed formats)
    problems: list[tuple[int, Problem]] = field(default_factory=list)  # validation problems, by record position
    images: int = 0  # of the valid rows: raw images kept, and patches of their multimodal_train_inputs
    patches: int = 0

    def kept(self) -> pa.Table:
        """The valid rows that survive the reject rule, in record order."""
        keep = self.fields.keep
        return self.rows if keep.all() else self.rows.filter(pa.array(keep))


def _images(col) -> int:
    """Images held by an images column (its lists' total length)."""
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    # a slice's own lists (its offsets' span), not the whole buffer it views
    return sum(ch.offsets[-1].as_py() - ch.offsets[0].as_py() for ch in chunks if len(ch))


class StepAssembler:
    """Gathers one step's validated chunks (pipeline.validate.NormChunk, in record order) and
    finishes the step.

    `input_format` (a reader registry name) says whether group_index is a key of the prompt's
    content (its descriptor's `content_groups`: renumbered 0, 1, ... before the rules run).
    `columns` are the staged columns to hold of each chunk's rows (None: all of them); a
    caller that stages its rows elsewhere (convert) adds chunks without batches and hands the
    rows to `finish`.
    """

    def __init__(self, opts, *, split: str = "train", input_format: str | None = None,
                 columns: Sequence[str] | None = None, keep_text: bool = False):
        self.opts = opts
        self.split = split
        self.content_groups = input_format is not None and format_of(input_format).content_groups
        # how far behind a step a weight version is (the format's version_lag; None: not comparable)
        self.version_lag = format_of(input_format).versions_behind if input_format is not None else None
        self.columns = None if columns is None else list(dict.fromkeys([*STEP_COLUMNS, *columns]))
        self.keep_text = keep_text
        self.chunks: list[NormChunk] = []  # per-record summaries only
        self.problems: list[tuple[int, Problem]] = []  # validation problems, by record position
        self.batches: list[pa.RecordBatch] = []
        self.records = 0
        self.mm_rows = [0, 0]  # valid rows seen in batches: with multimodal_train_inputs, all
        self.media_dropped = 0  # images and videos of those rows not kept (validate/media.py)
        self.media = [0, 0]  # images kept and patches (core/tensors.patches_per_row) of those rows

    @classmethod
    def of_input(cls, inp, opts, **kw) -> "StepAssembler":
        """The assembler of one input (an inputs.discover.InputFile): its split and format."""
        return cls(opts, split=inp.split, input_format=inp.format, **kw)

    def add(self, nc: NormChunk) -> int:
        """Take the next chunk (its problems by position in the chunk); returns the record
        position of its first record in the step."""
        base = self.records
        self.chunks.append(summary_only(nc))
        self.problems.extend((base + i, p) for i, p in nc.problems)
        for b in nc.batches:
            self.mm_rows[0] += len(b) - b.column(MM).null_count
            self.mm_rows[1] += len(b)
            self.media_dropped += int(np.sum(b.column("_media_dropped").to_numpy(zero_copy_only=False)))
            self.media[0] += _images(b.column("images"))
            self.media[1] += int(tensors.patches_per_row(b.column(MM)).sum())
        if self.columns is None:
            self.batches.extend(nc.batches)
        else:
            self.batches.extend(b.select(self.columns) for b in nc.batches)
        self.records += len(nc.numbers)
        return base

    def where(self) -> Callable[[int], Location]:
        return locator(self.chunks)

    def held_rows(self) -> pa.Table:
        """The rows held so far, as one table (emptying the holder)."""
        full = pre_schema(self.keep_text)
        schema = full if self.columns is None else pa.schema([full.field(c) for c in self.columns])
        t = pa.Table.from_batches(self.batches, schema=schema) if self.batches else schema.empty_table()
        self.batches = []
        return t

    def finish(self, step: int, *, rows: pa.Table | None = None, fail: bool, unknown_groups_ok: bool = False,
               chunk: int | None = None) -> AssembledStep:
        """Ids, rejects, rewards and fields of the step. `rows`: the valid rows with at least
        STEP_COLUMNS, in record order (default: those held). `fail`: raise StepProblems on any
        problem (validation or id rule) instead of rejecting rollouts. `unknown_groups_ok`,
        `chunk`: as compute_step takes them (inspect shows what convert refuses; the slime
        hooks group samples without group_index in slime's reward rows)."""
        pre = self.held_rows() if rows is None else rows
        where = self.where()
        id_state, explicit, group_index = id_inputs(self.chunks)
        if self.content_groups:  # keys of the prompt's content, the same in every chunk
            group_index, pre = dense_groups(group_index, pre)
        oldest = None
        if getattr(self.opts, "max_staleness", None) is not None and self.version_lag is not None:
            oldest = oldest_versions(pre.column("weight_versions").to_pylist(), step, self.version_lag)
        sf = compute_step(
            id_state=id_state, explicit=explicit, group_index=group_index, problems=self.problems, where=where,
            row_pos=pre.column("_pos").to_numpy(), reward_values=pre.column("_reward_value").to_numpy(),
            mask_totals=pre.column("_mask_total").to_numpy(), split=self.split, step=step, opts=self.opts,
            fail=fail, unknown_groups_ok=unknown_groups_ok, chunk=chunk, oldest=oldest,
        )
        note = self._mixed_multimodal(pre, step)
        if note:
            sf.notes.append(note)
        dropped = self.media_dropped
        if not self.mm_rows[1] and "_media_dropped" in pre.column_names:  # rows staged elsewhere (convert)
            dropped = int(np.sum(pre.column("_media_dropped").to_numpy()))
        if dropped:
            sf.notes.append(f"step {step}: {dropped} image(s) or video(s) of multimodal_inputs not kept (videos are "
                            "not stored; images need Pillow, pip install 'rollout-cli[vlm]', and a mode PNG holds)")
        images, patches = self.media
        if not self.mm_rows[1] and MM in pre.column_names:  # rows staged elsewhere (convert)
            images, patches = _images(pre.column("images")), int(tensors.patches_per_row(pre.column(MM)).sum())
        return AssembledStep(self.split, step, self.records, sf, pre, where, id_state, explicit, group_index,
                             self.problems, images, patches)

    def _mixed_multimodal(self, pre: pa.Table, step: int) -> str | None:
        """The note on a step where some valid samples carry multimodal inputs and others lack
        them, when the image placeholder rule is off (--image-token-id checks them)."""
        if getattr(self.opts, "image_rule", None) is None or image_rule(self.opts) is not None:
            return None
        with_mm, total = self.mm_rows
        if not total and MM in pre.column_names:  # rows staged elsewhere (convert): counted here
            with_mm, total = pre.num_rows - pre.column(MM).null_count, pre.num_rows
        if 0 < with_mm < total:
            return (f"step {step}: {with_mm} of {total} samples carry multimodal_train_inputs and the rest none; "
                    "--image-token-id checks each prompt's image placeholders against them")
        return None
