"""What the converting process hands its workers, and what they hand back (small, picklable)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import Problem
from ..inputs.discover import InputFile


@dataclass
class PartTask:
    """A piece of one input for one worker: a whole file, or a newline-aligned byte range."""

    unit: int
    part: int
    input: InputFile
    start: int
    end: int | None
    stage_path: str
    threads: int = 1  # cores the part may use (a step read whole while cores are spare)
    fingerprint: bool = False  # the reader fingerprints the input as it reads it whole (registry.fingerprinted_on_read)


@dataclass
class PartResult:
    """What a parse worker hands back: per-record summaries (small) and where the rows are."""

    unit: int
    part: int
    records: int
    lines: int  # lines consumed (JSONL byte ranges number lines from 1; fixed up later)
    source: str
    kind: str
    numbers: list[int]
    id_state: list[int]
    explicit_id: list
    group_index: list
    valid: list[bool]
    problems: list[tuple[int, Problem]]
    stage_path: str | None
    step_from_payload: int | None = None
    train_dump: bool = False
    stopped: bool = False  # hit the problem budget
    start: int = 0  # the byte offset it starts at: parts are put in this order
    notes: list[str] = field(default_factory=list)  # the reader's notes (inputs/base.ReadInfo.notes)
    fingerprint: dict | None = None  # the input's, taken as it was read (PartTask.fingerprint)


@dataclass
class UnitResult:
    split: str
    step: int
    input: InputFile
    samples: int
    rows: int
    rejected: int
    rollouts: int
    tokens: int
    shards: list[dict]
    tokens_per_shard: list[int]
    imbalance: float
    rejects: list[dict]
    anomalies: list[dict]
    warnings: list[str]
    denominators: dict = field(default_factory=dict)  # pipeline.fields.STEP_FIELDS -> int
    schedule: dict | None = None  # --schedule slime: the step's optimizer steps and dropped rollouts
    notes: list[str] = field(default_factory=list)  # what the step's rules did worth saying (convert's notes)
    not_token_exact: int = 0  # rows written whose tokens a text dump's tokenizing gave (not the ids sampled)
    fingerprint: dict | None = None  # the input's, taken as it was read (PartTask.fingerprint)
