"""`rollout-cli inspect`: flags -> `inspect.inspect_paths` / `inspect.show_rollout` -> rich table, plain text or JSON.

A rich table on a terminal, aligned plain text when stdout is piped, one JSON object with --json.
"""
from __future__ import annotations

import json
import sys
from typing import Any, List, Optional

import typer

from ..core.choices import Estimator, GroupBy, RewardBaseline, Scope, SiblingReward, Split
from .options import reward_baseline_option, sibling_reward_option

TEXT_GROUP_LIMIT = 50  # groups shown as a table when --limit is not given (JSON: all)
TEXT_ANOMALY_LIMIT = 20  # anomalies listed as a table without -v
TEXT_FIELD_CHARS = 2000  # prompt/response/label characters shown by --show in text mode


def inspect_cmd(
    paths: List[str] = typer.Argument(..., help="Dump files or folders (searched recursively), - for stdin JSONL, or converted output folders (with manifest.json).", show_default=False),
    group_by: Optional[GroupBy] = typer.Option(None, "--group-by", help="One row per group; rollout_id groups are per (step, rollout_id)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object on stdout: {summary, groups, anomalies} (docs/inspect.md)."),
    limit: Optional[int] = typer.Option(None, "--limit", help=f"Show at most N groups (default: all with --json, {TEXT_GROUP_LIMIT} in tables; 0: all)."),
    sort: Optional[str] = typer.Option(None, "--sort", help="Sort groups by COLUMN[:asc|:desc] (samples, tokens, mask_sum, reward_mean, ...; default: key ascending, columns descending)."),
    show: Optional[str] = typer.Option(None, "--show", help="Print one rollout's samples: STEP:ID, or ID when there is one step."),
    split: Split = typer.Option(Split.train, "--split", help="Which split to look at: train steps or eval dumps."),
    rollout_id_scope: Scope = typer.Option(Scope.strict, "--rollout-id-scope", help="As convert (dumps): strict, step or group."),
    reward_baseline: RewardBaseline = reward_baseline_option(),
    sibling_reward: SiblingReward = sibling_reward_option(),
    reward_key: Optional[str] = typer.Option(None, "--reward-key", help="As convert (dumps): pick this key from dict rewards."),
    n_samples_per_prompt: Optional[int] = typer.Option(None, "--n-samples-per-prompt", help="As convert (dumps): group size where group_index is missing; also the expected group size."),
    advantage_estimator: Estimator = typer.Option(Estimator.grpo, "--advantage-estimator", help="As convert (dumps)."),
    disable_rewards_normalization: bool = typer.Option(False, "--disable-rewards-normalization", help="As convert (dumps)."),
    disable_grpo_std_normalization: bool = typer.Option(False, "--disable-grpo-std-normalization", help="As convert (dumps)."),
    steps: Optional[str] = typer.Option(None, "--steps", help="Select steps: A:B (inclusive), A:, :B or A."),
    step: Optional[int] = typer.Option(None, "--step", help="Step number of a single input (required for stdin)."),
    trust_pickle: bool = typer.Option(False, "--trust-pickle", help="Allow .pt dumps that need full unpickling. Unpickling can run code: only for files you trust."),
    max_anomalies: int = typer.Option(100, "--max-anomalies", help="Keep at most N anomalies of each kind (the counts stay complete; 0: all)."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="No notes on stderr."),
    verbose: bool = typer.Option(False, "-v", "--verbose", help="List every kept anomaly and skipped file; tracebacks for internal errors."),
) -> None:
    """Show what is in dumps (with the ids and rewards convert would assign) or in converted output."""
    from .app import _run

    def work():
        from ..inspect import InspectOptions, inspect_paths, show_rollout

        opts = InspectOptions(
            advantage_estimator=advantage_estimator.value,
            n_samples_per_prompt=n_samples_per_prompt,
            reward_key=reward_key,
            rewards_normalization=not disable_rewards_normalization,
            grpo_std_normalization=not disable_grpo_std_normalization,
            rollout_id_scope=rollout_id_scope.value,
            reward_baseline=reward_baseline.value,
            sibling_reward=sibling_reward.value,
            steps=steps,
            step=step,
            trust_pickle=trust_pickle,
            split=split.value,
            max_anomalies=max_anomalies or None,
        )
        if show is not None:
            return show_rollout(paths, show, opts)
        shown = limit if (limit is not None or as_json) else TEXT_GROUP_LIMIT
        return inspect_paths(paths, group_by.value if group_by else None, opts, sort=sort, limit=shown)

    result = _run(work, as_json, verbose)
    if as_json:
        print(json.dumps(result))
        return
    if "rollout" in result:
        _render_show(result["rollout"])
        return
    _render(result, verbose)
    if not quiet:
        for n in result["summary"]["notes"]:
            print(f"note: {n}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("inspect")(inspect_cmd)


# ------------------------------------------------------------------------------------------ rendering


def _console():
    from rich.console import Console

    return Console(highlight=False)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e6 else f"{v:.6g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_fmt(x)}" for k, x in v.items())
    return str(v)


def _table(con, title: str, headers: list[str], rows: list[list[Any]], left: int = 1) -> None:
    """A rich table on a terminal; aligned plain text otherwise. The first `left` columns align left."""
    cells = [[_fmt(v) for v in r] for r in rows]
    if con.is_terminal:
        from rich.table import Table

        t = Table(title=title, title_justify="left")
        for k, h in enumerate(headers):
            t.add_column(h, justify="left" if k < left or h in ("statuses", "message", "where") else "right",
                         overflow="fold")
        for r in cells:
            t.add_row(*r)
        con.print(t)
        return
    widths = [max([len(h)] + [len(r[k]) for r in cells]) for k, h in enumerate(headers)]

    def line(vals: list[str]) -> str:
        out = []
        for k, v in enumerate(vals):
            last = k == len(vals) - 1
            if k < left or headers[k] in ("statuses", "message", "where"):
                out.append(v if last else v.ljust(widths[k]))
            else:
                out.append(v.rjust(widths[k]))
        return "  ".join(out).rstrip()

    print(title)
    print(line(headers))
    for r in cells:
        print(line(r))
    print()


def _text(con, s: str) -> None:
    if con.is_terminal:
        con.print(s, markup=False, soft_wrap=True)
    else:
        print(s)


def _hist(h: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in h.items()) or "-"


def _rstats(s: dict) -> str:
    if not s["count"]:
        return "none"
    return f"mean {_fmt(s['mean'])}  std {_fmt(s['std'])}  min {_fmt(s['min'])}  max {_fmt(s['max'])}  (n {s['count']})"


def _where(w: list[dict]) -> str:
    if not w:
        return "-"
    first = w[0]
    s = first["file"]
    for k in ("line", "row", "sample"):
        if k in first:
            s += f":{k} {first[k]}"
    return s + (f" (+{len(w) - 1})" if len(w) > 1 else "")


def _render(result: dict, verbose: bool) -> None:
    con = _console()
    s = result["summary"]
    what = "converted output" if s["input"] == "converted" else "dumps"
    _text(con, f"{s['split']} split of {what}: {s['files']} file(s), {s['steps']} step(s), {s['samples']} samples "
               f"({s['rows']} kept, {s['rejected']} rejected)")
    _text(con, f"rollouts {s['rollouts']}, prompt groups {s['prompt_groups']}")
    t = s["tokens"]
    _text(con, f"tokens: prompt {t['prompt']}, response {t['response']}, total {t['total']}, loss-mask sum {t['mask_sum']}")
    _text(con, f"status: {_hist(s['status'])}; truncation rate {_fmt(s['truncation_rate'])}")
    _text(con, f"raw_reward: {_rstats(s['rewards']['raw_reward'])}")
    _text(con, f"reward (post-processed): {_rstats(s['rewards']['reward'])}")
    _text(con, f"samples per rollout (size: rollouts): {_hist(s['samples_per_rollout'])}")
    _text(con, f"prompt-group sizes (size: groups): {_hist(s['group_sizes'])}")
    _text(con, "")
    _table(con, "per step", ["split", "step", "samples", "rejected", "rollouts", "groups", "tokens", "mask sum", "mean resp len",
                             "raw reward", "reward", "trunc rate", "zero-var groups"],
           [[p["split"], p["step"], p["samples"], p["rejected"], p["rollouts"], p["prompt_groups"], p["tokens"], p["mask_sum"],
             p["response_length_mean"], p["raw_reward_mean"], p["reward_mean"], p["truncation_rate"], p["zero_variance_groups"]]
            for p in s["per_step"]], left=1)
    if s["group_by"]:
        gb = s["group_by"]
        key_h = "step:rollout_id" if gb == "rollout_id" else gb
        mask_h = "rollout_mask_sum" if gb == "rollout_id" else "mask sum"
        rows = []
        for g in result["groups"]:
            key = f"{g['key'][0]}:{g['key'][1]}" if gb == "rollout_id" else g["key"]
            rows.append([key, g["samples"], g["rollouts"], g["prompt_groups"], g["tokens"],
                         g["rollout_mask_sum"] if gb == "rollout_id" else g["mask_sum"],
                         g["reward_mean"], g["reward_min"], g["reward_max"], g["raw_reward_mean"], g["statuses"]])
        shown = len(result["groups"])
        title = f"by {gb}: {s['groups_total']} group(s)" + (f", first {shown} shown (--limit 0 shows all)" if shown < s["groups_total"] else "")
        _table(con, title, [key_h, "samples", "rollouts", "groups", "tokens", mask_h, "reward mean", "min", "max", "raw mean", "statuses"],
               rows)
    counts = s["anomaly_counts"]
    if not counts:
        _text(con, "anomalies: none")
        return
    _text(con, "anomalies: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    items = result["anomalies"] if verbose else result["anomalies"][:TEXT_ANOMALY_LIMIT]
    _table(con, f"anomalies ({len(items)} of {sum(counts.values())} listed{'' if verbose else '; -v or --json for all kept'})",
           ["level", "kind", "step", "where", "message"],
           [[a["level"], a["kind"], a["step"], _where(a["where"]), a["message"]] for a in items], left=3)


def _clip(s: str | None) -> str:
    if s is None:
        return "-"
    if len(s) <= TEXT_FIELD_CHARS:
        return s
    return s[:TEXT_FIELD_CHARS] + f"... ({len(s) - TEXT_FIELD_CHARS} more characters; --json shows all)"


def _runs(runs: list | None) -> str:
    if runs is None:
        return "-"
    parts = [f"{v}x{n}" for v, n in runs[:12]]
    return " ".join(parts) + (f" ... ({len(runs) - 12} more runs)" if len(runs) > 12 else "")


def _render_show(r: dict) -> None:
    con = _console()
    _text(con, f"rollout {r['step']}:{r['rollout_id']} ({r['split']} step {r['step']}, rollout_id {r['rollout_id']}, {r['input']}): "
               f"{len(r['samples'])} sample(s), rollout_mask_sum {_fmt(r['rollout_mask_sum'])}")
    if r["note"]:
        _text(con, f"note: {r['note']}")
    for k, smp in enumerate(r["samples"]):
        _text(con, "")
        _text(con, f"-- sample {k + 1}/{len(r['samples'])}  {_where([smp['where']])}  sample_index {_fmt(smp['sample_index'])}  "
                   f"group_index {_fmt(smp['group_index'])}  status {smp['status']}  source {smp['source_name']}")
        _text(con, f"   tokens {smp['total_length']} (prompt {smp['prompt_length']}, response {smp['response_length']}); "
                   f"loss mask {smp['mask_sum']}/{smp['response_length']} trainable, runs {_runs(smp['mask_runs'])}")
        _text(con, f"   reward {_fmt(smp['reward'])} (raw {_fmt(smp['raw_reward'])})")
        if r["text"]:
            _text(con, f"   prompt: {_clip(smp.get('prompt'))}")
            _text(con, f"   response: {_clip(smp.get('response'))}")
            _text(con, f"   label: {_clip(smp.get('label'))}")
    for rej in r["rejected"]:
        _text(con, f"rejected: {_where([rej['where']])}: {rej['field'] or ''}{': ' if rej['field'] else ''}{rej['reason']}")
