"""Stage 1 (discovery): which files to read, their format, step and split."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ..core import layout, storage
from ..core.errors import InvalidInputError, UsageError
from .registry import FORMATS, STDIN_FORMAT, detectors, extension_format, extensions, format_of, train_formats

_EVAL = re.compile(r"eval_(\d+)")
_DIGITS = re.compile(r"(\d+)")


@dataclass
class InputFile:
    path: str  # what is opened ("-" for stdin)
    display: str  # what messages and the manifest show
    format: str  # a name of registry.FORMATS: jsonl | parquet | pt | nemo_rl | miles | prime_rl
    step: int | None
    split: str  # train | eval
    step_from: str  # payload | field | name | option
    # the parts of files that hold this unit's records, in order, as (path, start, end,
    # first_line): set for a format whose files hold several steps (its Format.units), where
    # `path` is the first of them and `display` names the step; empty: the whole of `path`
    ranges: tuple = ()


def input_format(path: str) -> str | None:
    """The format of a file: the first format whose detector claims it, else its extension's."""
    if path != "-":
        for fmt in detectors():
            if fmt.claims(path):
                return fmt.name
    return extension_format(path)


def _stem(path: str) -> str:
    name = os.path.basename(path)
    for ext in extensions():
        if name.lower().endswith(ext):
            return name[: -len(ext)]
    return name


MAX_STEP = 2**63 - 1


def check_step(value, what: str) -> int:
    """A step number: an integer in [0, 2**63 - 1] (the int64 `step` column; steps count from 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{what}: step: expected an integer step number, got {value!r}")
    if not 0 <= value <= MAX_STEP:
        raise InvalidInputError(f"{what}: step: expected a step number in [0, {MAX_STEP}], got {value}")
    return value


def _step_from_name(path: str) -> tuple[int | None, str]:
    stem = _stem(path)
    m = _EVAL.search(stem)
    if m:
        return check_step(int(m.group(1)), path), "eval"
    runs = _DIGITS.findall(stem)
    return (check_step(int(runs[-1]), path) if runs else None), "train"


def _field_step(path: str, fmt: str) -> int | None:
    value = format_of(fmt).field_step(path)
    if value is None:
        return None
    return check_step(value, path)


def is_train_side_dump(path: str) -> bool:
    """slime's `--save-debug-train-data` / `--dump-details` train dumps live under train_data/."""
    return "train_data" in os.path.normpath(path).split(os.sep)


def _is_output_dir(path: str) -> bool:
    """A rollout-cli output folder (complete or interrupted): never read back as input."""
    return os.path.isfile(layout.manifest_path(path)) or os.path.isdir(os.path.join(path, layout.STAGING))


def check_input_format(name: str | None) -> None:
    """--input-format: a name of the format registry."""
    if name is not None and name not in FORMATS:
        raise UsageError(f"--input-format: expected one of {', '.join(sorted(FORMATS))}, got {name!r}")


def discover(paths: list[str], step: int | None = None, exclude: str | None = None,
             options=None) -> tuple[list[InputFile], list[str], list[str]]:
    """Resolve inputs to files; returns (inputs, skipped non-input files, notes). Folders that
    are rollout-cli outputs (and `exclude`, the output being written) are not searched. A file's
    format is the first of the registry's detectors that claims it, else its extension's;
    `options.input_format` (--input-format) is the format of every input file. `options`
    (RuleOptions) also carries what framework readers choose by (`prime_rl_subset`)."""
    forced = getattr(options, "input_format", None)
    check_input_format(forced)
    excluded = os.path.realpath(exclude) if exclude else None
    files: list[tuple[str, str, str, bool]] = []  # (path, display, format, named on the command line)
    skipped: list[str] = []
    notes: list[str] = []
    for p in paths:
        if p == "-":
            files.append(("-", "<stdin>", STDIN_FORMAT, True))
        elif storage.is_uri(p):
            try:
                with storage.reading(p):
                    found = storage.list_files(p)
            except FileNotFoundError:
                raise UsageError(f"{p}: no such file or directory") from None
            for full in found:
                fmt = input_format(full)
                if fmt is None:
                    skipped.append(full)
                else:
                    files.append((full, full, fmt, False))
        elif os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                if os.path.realpath(root) == excluded or _is_output_dir(root):
                    notes.append(f"{root}: a rollout-cli output folder, not read as input")
                    dirs[:] = []
                    continue
                dirs.sort()
                for name in sorted(names):
                    full = os.path.join(root, name)
                    fmt = input_format(full)
                    if fmt is None:
                        skipped.append(full)
                    else:
                        files.append((full, full, fmt, False))
        elif os.path.exists(p):
            fmt = input_format(p)
            if fmt is None:
                raise UsageError(f"{p}: not a supported input (expected {', '.join(sorted(extensions()))})")
            files.append((p, p, fmt, True))
        else:
            raise UsageError(f"{p}: no such file or directory")
    if step is not None and len(files) != 1:
        raise UsageError("--step applies to a single input (stdin or one file)")
    out: list[InputFile] = []
    several: dict[str, list[str]] = {}  # format -> its files, for a format whose files hold several steps
    for path, display, fmt, named in files:
        if forced is not None and path != "-":
            fmt = forced
        if is_train_side_dump(path):
            notes.append(f"{display}: slime train-side dump (train_data/), skipped")
            continue
        desc = format_of(fmt)
        note = desc.skip_note(path, options, named)
        if note:
            notes.append(note)
            continue
        if desc.text_dump is not None and not getattr(options, "tokenizer", None):
            from .textdump import no_tokenizer_message

            raise InvalidInputError(no_tokenizer_message(f"{display}: {desc.text_dump}"))
        if desc.units is not None and path != "-":
            if step is not None:
                raise UsageError(f"{display}: --step does not apply: a {fmt} file names the step of each record")
            several.setdefault(fmt, []).append(path)
            continue
        placed = desc.step_and_split(path)
        if placed is not None:
            name_step, split = check_step(placed[0], path), placed[1]
        else:
            name_step, split = _step_from_name(path) if path != "-" else (None, "train")
        if step is not None:
            out.append(InputFile(path, display, fmt, step, split, "option"))
            continue
        if path == "-":
            raise UsageError("reading stdin needs --step N")
        field_step = _field_step(path, fmt) if placed is None else None
        if field_step is not None:
            out.append(InputFile(path, display, fmt, field_step, split, "field"))
        else:
            out.append(InputFile(path, display, fmt, name_step, split, "name"))
            if name_step is None and not desc.payload_step:
                raise UsageError(
                    f"{display}: cannot tell its step: put the step number in the file name, give samples a `step` field, or pass --step"
                )
    for fmt, paths in several.items():
        units, said = format_of(fmt).expand(paths, options)
        notes.extend(said)
        for path, display, unit_step, split, ranges in units:
            out.append(InputFile(path, display, fmt, check_step(unit_step, display), split, "field", tuple(ranges)))
    return out, skipped, notes


def parse_steps(spec: str | None) -> tuple[int | None, int | None]:
    """`A:B` (inclusive), `A:`, `:B` or `A`."""
    if not spec:
        return None, None
    try:
        if ":" in spec:
            a, b = spec.split(":", 1)
            return (int(a) if a else None), (int(b) if b else None)
        v = int(spec)
        return v, v
    except ValueError:
        raise UsageError(f"--steps: expected A:B, A:, :B or A (integers), got {spec!r}") from None


def discover_train(paths: list[str]) -> list[InputFile]:
    """The train-side inputs of `audit --train`: files (folders searched recursively) of a
    format with a train reader (its descriptor's `train_reader`; recognised as `discover` does,
    by the first detector that claims them, else by extension), train_data/ folders
    included; eval logs left out. `step` is the format's own (from its name), else the first
    number in the name: a hint only (slime names them `{rollout_id}.pt` or with `{rank}` after
    it); each payload's own rollout_id decides."""
    found: list[tuple[str, str, bool]] = []
    for p in paths:
        if storage.is_uri(p):
            try:
                with storage.reading(p):
                    found.extend((f, f, False) for f in storage.list_files(p) if extension_format(f) is not None)
            except FileNotFoundError:
                raise UsageError(f"{p}: no such file or directory") from None
        elif os.path.isdir(p):
            for root, dirs, names in os.walk(p):
                dirs.sort()
                found.extend((os.path.join(root, n), os.path.join(root, n), False) for n in sorted(names)
                             if extension_format(n) is not None)
        elif os.path.exists(p):
            found.append((p, p, True))
        else:
            raise UsageError(f"--train {p}: no such file or directory")
    out = []
    for path, display, named in found:
        fmt = input_format(path) if not storage.is_uri(path) else extension_format(path)
        desc = FORMATS.get(fmt)
        if desc is None or desc.train_reader is None:
            if named:
                raise UsageError(f"--train {p}: not a train-side input (expected a format with a train reader: "
                                 f"{', '.join(train_formats())})")
            continue
        own = desc.step_and_split(path)
        if own is not None and own[1] != "train":
            continue  # an eval log: nothing was trained on it
        runs = _DIGITS.findall(_stem(path))
        step = own[0] if own is not None else int(runs[0]) if runs else None
        out.append(InputFile(path, display, fmt, step, "train", "name"))
    return out
