"""The command functions: each takes what its command takes (paths as `str` or `Path`, options by
their field's name: the flag's with `_` for `-`, `rewards_normalization=False` for
`--disable-rewards-normalization`) and returns the frozen result of results.py, whose `to_dict()`
is the command's `--json` object. Errors are rollout_cli.errors' (each with its exit code).

Light to import: each function loads its implementation when called (pyarrow then; torch only
for `export`)."""
from __future__ import annotations

import dataclasses
import os
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Union

from ..core.errors import UsageError
from .results import (AuditResult, ConvertResult, ExportResult, InspectResult, ReportResult, RolloutResult,
                      VerifyResult)

if TYPE_CHECKING:  # pragma: no cover
    from ..core.options import ConvertOptions
    from ..derivation.run import DeriveResult

__all__ = ["audit", "check_gates", "convert", "derive", "export", "inspect", "report", "verify"]

PathLike = Union[str, os.PathLike]
Progress = Callable[[str, int, int], None]  # (what, done, total); total 0 while not known


def _path(p: PathLike) -> str:
    return os.fspath(p)


def _paths(ps: Union[PathLike, Sequence[PathLike]], what: str) -> list[str]:
    """A path or a sequence of them, as strings (a lone path is a list of one)."""
    if isinstance(ps, (str, os.PathLike)):
        return [os.fspath(ps)]
    out = [os.fspath(p) for p in ps]
    if not out:
        raise UsageError(f"{what}: give at least one path")
    return out


def _value(v: Any) -> Any:
    """A choice as its string (the CLI's enums are str enums)."""
    return v.value if isinstance(v, Enum) else v


def _options(cls: type, settings: dict, **fixed: Any):
    """`cls(**settings, **fixed)`, a misspelt setting a UsageError naming it."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise UsageError(f"unknown option(s) {', '.join(unknown)}; expected some of {', '.join(sorted(names))}")
    return cls(**{k: _value(v) for k, v in {**settings, **fixed}.items()})


def convert(inputs: Union[PathLike, Sequence[PathLike]], out: PathLike, options: Optional[ConvertOptions] = None, *,
            progress: Optional[Progress] = None, **settings: Any) -> ConvertResult:
    """Convert rollout dumps (files or folders, local or s3:// and gs:// URIs, `-` for JSONL on
    stdin) into sharded train-data Parquet plus a manifest in `out` (`rollout-cli convert`).

    Settings are ConvertOptions' fields (`shards=4`, `keep_text=True`, ...), given as `options`,
    as keywords, or both (the keywords win). `progress(what, done, total)` is called as steps
    finish. Raises UsageError (2), InvalidInputError (3), OutputExistsError (5), OutputError (6),
    OutputBusyError (8) or InputUnavailableError (9); nothing partial is left looking complete."""
    from ..core.options import ConvertOptions
    from ..run.convert import convert as run_convert

    if options is None:
        opts = _options(ConvertOptions, settings)
    else:
        _options(ConvertOptions, settings)  # names checked
        opts = dataclasses.replace(options, **{k: _value(v) for k, v in settings.items()})
    return ConvertResult.from_dict(run_convert(_paths(inputs, "inputs"), _path(out), opts, progress=progress))


def inspect(paths: Union[PathLike, Sequence[PathLike]], *, group_by: Optional[str] = None, sort: Optional[str] = None,
            limit: Optional[int] = None, show: Optional[str] = None, split: str = "train",
            max_anomalies: Optional[int] = 100, **settings: Any) -> Union[InspectResult, RolloutResult]:
    """What is in dumps or converted outputs (`rollout-cli inspect`): counts, groups, rewards and
    anomalies, as an InspectResult. On dumps, the ids and rewards are those convert assigns with
    the same settings (RuleOptions' fields, e.g. `n_samples_per_prompt=8`; also `tokenizer`,
    `check_template`, `chat_template`).

    `group_by` (rollout_id, group_index, step, status, source_name) gives one row per group,
    sorted by `sort` ("COL[:asc|desc]") and cut to `limit` groups (None or 0: all);
    `max_anomalies` keeps that many anomalies per kind (None or 0: all; counts stay complete).
    With `show="STEP:ID"` (or "ID" for one step): that rollout's samples, as a RolloutResult.
    Raises UsageError (2), InvalidInputError (3), IntegrityError (4) or InputUnavailableError (9)."""
    from ..inspection import InspectOptions, inspect_paths, show_rollout

    opts = _options(InspectOptions, settings, split=_value(split), max_anomalies=max_anomalies or None)
    ps = _paths(paths, "paths")
    if show is not None:
        return RolloutResult.from_dict(show_rollout(ps, show, opts))
    return InspectResult.from_dict(inspect_paths(ps, _value(group_by), opts, sort=sort, limit=limit))


def verify(out: PathLike, *, quick: bool = False) -> VerifyResult:
    """Check a converted output against its manifest (`rollout-cli verify`): checksums, schema
    and every invariant (`quick`: sizes, footers and the manifest's arithmetic only). A broken
    invariant is a failure in the result (`ok` False; the command exits 4 on it), not an
    exception; UsageError (2) when `out` is no folder."""
    from ..verification.check import verify_output

    return VerifyResult.from_dict(verify_output(_path(out), quick=quick))


def audit(rollout_paths: Union[PathLike, Sequence[PathLike]], train_paths: Union[PathLike, Sequence[PathLike]], *,
          max_divergences: Optional[int] = 100, **settings: Any) -> AuditResult:
    """Compare rollout dumps with what the trainer computed from them (`rollout-cli audit`), step
    by step, under convert's id and reward rules (RuleOptions' fields as keywords).
    `max_divergences`: listed per step (None or 0: all; counts stay complete). A divergence is
    in the result (`diverged`; the command exits 4 on it). Raises UsageError (2),
    InvalidInputError (3) or InputUnavailableError (9)."""
    from ..auditing import AuditOptions, audit_paths

    opts = _options(AuditOptions, settings, max_divergences=max_divergences or None)
    return AuditResult.from_dict(audit_paths(_paths(rollout_paths, "rollout_paths"), _paths(train_paths, "train_paths"),
                                             opts))


def report(paths: Union[PathLike, Sequence[PathLike]], out: PathLike, *,
           train: Optional[Union[PathLike, Sequence[PathLike]]] = None, overwrite: bool = False, details: int = 100,
           max_anomalies: Optional[int] = 100, progress: Optional[Progress] = None, **settings: Any) -> ReportResult:
    """Write one self-contained HTML page of a run's rollouts to `out` (`rollout-cli report`),
    from dumps or converted outputs; `train` (the trainer's dumps) adds a trainer section.
    `details`: rollouts whose samples the page embeds; settings: RuleOptions' fields. Raises
    UsageError (2), InvalidInputError (3), OutputExistsError (5) or OutputError (6)."""
    from ..core.options import RuleOptions
    from ..inspection import InspectOptions
    from ..reporting import ReportOptions, build_report

    rules = _options(RuleOptions, settings)
    opts = ReportOptions(InspectOptions(**vars(rules)), details=details, max_anomalies=max_anomalies or None,
                         train=_paths(train, "train") if train else None)
    return ReportResult.from_dict(build_report(_paths(paths, "paths"), _path(out), opts, overwrite=overwrite,
                                               progress=progress))


def export(out: PathLike, dest: PathLike, *, format: str = "slime-pt", steps: Optional[str] = None,
           split: Optional[str] = None, overwrite: bool = False, wait: Optional[float] = None) -> ExportResult:
    """Write a converted output's steps into the folder `dest` as files slime replays
    (`rollout-cli export`; format "slime-pt": DEST/{step}.pt and DEST/eval_{step}.pt), staged and
    renamed into place. `steps` "A:B" selects steps, `split` train or eval (default: both),
    `wait` seconds for another writer of DEST. Needs torch. Raises UsageError (2),
    InvalidInputError (3), IntegrityError (4), OutputExistsError (5), OutputError (6) or
    OutputBusyError (8)."""
    from ..exporting.slime_pt import FORMATS, export_slime_pt

    fmt = _value(format)
    if fmt not in FORMATS:
        raise UsageError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    return ExportResult.from_dict(export_slime_pt(_path(out), _path(dest), steps=steps, split=_value(split),
                                                  overwrite=overwrite, wait=wait))


def derive(out: PathLike, dest: PathLike, as_: str = "sft", **options: Any) -> DeriveResult:
    """Write SFT, DPO, KTO or reward-model rows (`as_`) derived from a converted output's
    rollouts into the folder `dest`, one `datasets.load_dataset(DEST)` reads (`rollout-cli
    derive`; options: DeriveOptions' fields). Raises UsageError (2), InvalidInputError (3),
    OutputExistsError (5), OutputError (6) or OutputBusyError (8)."""
    from ..derivation.run import derive as run_derive

    return run_derive(_path(out), _path(dest), as_=_value(as_), **{k: _value(v) for k, v in options.items()})


_GATED = {InspectResult: "inspect", AuditResult: "audit"}


def check_gates(result: Union[InspectResult, AuditResult], fail_on: Union[str, Sequence[str], None] = None,
                checks: Optional[PathLike] = None, *, junit_xml: Optional[PathLike] = None
                ) -> Union[InspectResult, AuditResult]:
    """The result with its gates evaluated (`--fail-on`, `--checks`, `--junit-xml` of inspect and
    audit; docs/ci.md): `checks` holds one entry per check (`passed`, the worst value and the
    steps that crossed), `summary.notes` the checks file's skipped entries, and `checks_passed`
    says whether all passed (the command's exit 7 when not). `fail_on`: expressions such as
    "step.truncation_rate > 0.2"; `checks`: a TOML checks file; `junit_xml`: where to write the JUnit
    report. Raises UsageError (2) for a malformed expression or file."""
    from ..gates import evaluate, plan, write_junit

    command = _GATED.get(type(result))
    if command is None:
        raise UsageError(f"check_gates: expected the result of inspect or audit, got {type(result).__name__}")
    exprs = [fail_on] if isinstance(fail_on, str) else list(fail_on or [])
    p = plan(command, exprs, _path(checks) if checks is not None else None)
    base = dataclasses.replace(result, checks=None)
    found = evaluate(p, base.to_dict())
    summary = {**result.summary, "notes": [*result.summary["notes"], *p.notes()]}
    if junit_xml is not None:
        write_junit(_path(junit_xml), p, found)
    return dataclasses.replace(result, summary=summary, checks=found)
