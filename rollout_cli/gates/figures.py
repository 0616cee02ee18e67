"""The figures a gate can name, per command, and how each is read from the command's result.

The names are generated from the tables of the code that computes the figures, so a figure added
there can be gated at once and a name that is not computed cannot be written:

* inspect: `summary` by dotted path (inspect.aggregate.RUN_FIGURES), `status.STATUS`
  (core.schema.STATUSES), `step.NAME` for `summary.per_step[]` (inspect.aggregate.STEP_FIGURES)
  and `anomalies.KIND` for `summary.anomaly_counts` (inspect.anomalies.ANOMALY_KINDS);
* audit: `summary` (AUDIT_RUN_FIGURES below), `mismatch.NAME` and `ref_mismatch.NAME` of each
  step (audit.mismatch.MEANING), and `rules.samples` of each entry of the `rules` list.

A run-wide figure has one value; a per-step (or per-entry) figure has one per step, and its
check fails when any of them crosses.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

COMMANDS = ("inspect", "audit")

# audit's run-wide numbers (audit.api.audit_paths' `summary`; a test holds them to it)
AUDIT_RUN_FIGURES = {
    "steps": "steps audited, paired or not",
    "paired_steps": "steps in both inputs",
    "samples": "samples paired",
    "divergences": "divergences (audit exits 4 when there is any)",
    "rule_differences": "steps and fields where the trainer ran another named rule",
}

_MISSING = object()


@dataclass(frozen=True)
class Figure:
    """One name a check can use: where its value is in the result, and what it is."""

    name: str
    meaning: str
    section: str  # the heading `--fail-on help` lists it under
    path: tuple[str, ...]  # from the result (run-wide) or from each entry (per entry) to the number
    entries: tuple[str, ...] | None = None  # per-entry figures: the path of the list of entries
    label: tuple[str, ...] = ("step",)  # the keys that name an entry (a crossing step)
    absent: Any = None  # the value when the last key of `path` is missing (0 for counts)
    empty: Any = None  # per-entry figures: the one value when the list is missing or empty

    def values(self, result: dict) -> list[tuple[dict | None, Any]]:
        """[(label, value)]: one pair labelled None for a run-wide figure (and for a per-entry
        figure with no entries but an `empty` value), one per entry otherwise, labelled by its
        `label` keys; [] when a per-entry figure has no entries and no `empty` value."""
        if self.entries is None:
            return [(None, _get(result, self.path, self.absent))]
        items = _get(result, self.entries, None)
        if not items:
            return [] if self.empty is None else [(None, self.empty)]
        return [({k: e.get(k) for k in self.label if k in e}, _get(e, self.path, self.absent)) for e in items]


def _get(d: Any, path: tuple[str, ...], absent: Any) -> Any:
    """d[path[0]][path[1]]...; `absent` when the last key is missing, None when anything on the
    way is not an object (a step without a mismatch object)."""
    for i, k in enumerate(path):
        if not isinstance(d, dict):
            return None
        d = d.get(k, _MISSING)
        if d is _MISSING:
            return absent if i == len(path) - 1 else None
    return d


def _inspect() -> list[Figure]:
    from ..core.schema import STATUSES
    from ..inspection.aggregate import RUN_FIGURES, STEP_FIGURES
    from ..inspection.anomalies import ANOMALY_KINDS

    run = "run-wide (summary)"
    out = [Figure(n, m, run, ("summary", *n.split("."))) for n, m in RUN_FIGURES.items()]
    statuses = "sample statuses (summary.status; 0 when none)"
    out += [Figure(f"status.{s}", f"samples {s}", statuses, ("summary", "status", s), absent=0) for s in STATUSES]
    step = "per step (summary.per_step[]; fails when any step crosses, naming it)"
    out += [Figure(f"step.{n}", m, step, (n,), entries=("summary", "per_step")) for n, m in STEP_FIGURES.items()]
    anomalies = "anomaly counts (summary.anomaly_counts; 0 when none)"
    out += [Figure(f"anomalies.{k}", "anomalies of this kind", anomalies, ("summary", "anomaly_counts", k), absent=0)
            for k in ANOMALY_KINDS]
    tpl = "chat template (summary.template.per_step[], with --check-template)"
    out.append(Figure("template.drift_rate", "share of checked samples that drift", tpl, ("drift_rate",), entries=("summary", "template", "per_step")))
    return out


def _audit() -> list[Figure]:
    from ..auditing.mismatch import MEANING

    run = "run-wide (summary)"
    out = [Figure(n, m, run, ("summary", n)) for n, m in AUDIT_RUN_FIGURES.items()]
    for obj, what in (("mismatch", "train log_probs - rollout_log_probs"), ("ref_mismatch", "ref_log_probs - log_probs")):
        sec = f"per step (steps[].{obj}, d = {what})"
        out += [Figure(f"{obj}.{k}", m, sec, (obj, k), entries=("steps",)) for k, m in MEANING.items()]
    out.append(Figure("rules.samples", "samples of a finding (0 when there is none)",
                      "per rule finding (rules[]; fails when any crosses, naming its step and field)",
                      ("samples",), entries=("rules",), label=("step", "field"), empty=0))
    return out


def catalogue(command: str) -> dict[str, Figure]:
    """Every figure `command` can gate on, by name, in the order `--fail-on help` lists them."""
    if command == "inspect":
        figs = _inspect()
    elif command == "audit":
        figs = _audit()
    else:
        raise ValueError(f"no figures for command {command!r}: expected one of {', '.join(COMMANDS)}")
    return {f.name: f for f in figs}


def names_help(command: str) -> str:
    """The text of `rollout-cli COMMAND --fail-on help`: every name, by section, with its meaning."""
    sections: dict[str, list[Figure]] = {}
    for f in catalogue(command).values():
        sections.setdefault(f.section, []).append(f)
    out = [f'The figures `rollout-cli {command} --fail-on "NAME OP NUMBER"` can name, as',
           "--json shows them. OP is one of < <= > >= == !=. The check fails when NAME OP",
           "NUMBER holds, and when the figure is null or NaN; a per-step check fails when",
           "any step crosses."]
    for section, figs in sections.items():
        width = max(len(f.name) for f in figs) + 2
        out += ["", f"{section}:"] + [f"  {f.name.ljust(width)}{f.meaning}" for f in figs]
    return "\n".join(out) + "\n"
