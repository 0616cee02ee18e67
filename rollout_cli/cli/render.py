"""What the commands print for people: tables and summaries (a rich table on a terminal, aligned
plain text when piped), and the progress bar. rich is imported inside the functions, so that
importing the command line stays light."""
from __future__ import annotations

import sys
from typing import Any

TEXT_ANOMALY_LIMIT = 20  # anomalies listed as a table without -v
TEXT_FIELD_CHARS = 2000  # prompt/response/label characters shown by --show in text mode


def err_console():
    """A rich console on stderr."""
    from rich.console import Console

    return Console(stderr=True)


class Progress:
    """A rich progress bar on stderr when it is a terminal; no callback otherwise. The callback
    takes (what, done, total); the bar reads `prefix + what`."""

    def __init__(self, silent: bool, start: str = "converting", prefix: str = "steps "):
        self.silent = silent
        self.start, self.prefix = start, prefix
        self.bar = None

    def __enter__(self):
        if self.silent or not sys.stderr.isatty():
            return None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True,
                            console=err_console())
        self.bar.start()
        self.task = self.bar.add_task(self.start, total=None)

        def cb(what: str, done: int, total: int) -> None:
            self.bar.update(self.task, total=total or None, completed=done, description=f"{self.prefix}{what}")

        return cb

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def print_convert_summary(result: dict) -> None:
    """The table of steps `convert` prints when it is done: rich on a terminal, plain text
    otherwise (a CI log; and rich's import and layout would be a tenth of a small step's time)."""
    con = _console() if sys.stdout.isatty() else None
    c = result["counts"]
    dropped = f", {c['dropped']} dropped by slime's schedule" if c.get("dropped") else ""
    title = f"{result['out']}: {c['rows']} rows from {c['input_samples']} samples, {c['rejected']} rejected{dropped}"
    _table(con, title, ["split", "step", "samples", "rows", "rejected", "rollouts", "tokens", "shard max/mean"],
           [[s["split"], s["step"], s["samples"], s["rows"], s["rejected"], s["rollouts"], s["tokens"], f"{s['imbalance']:.3f}"]
            for s in result["steps"]], blank_after=False)
    if result["rejects"]:
        _text(con, f"rejected samples and reasons: {result['out']}/rejects.jsonl")
    _text(con, f"done in {result['elapsed_seconds']:.2f}s")


# ------------------------------------------------------------------------------------------ inspect


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


def _table(con, title: str, headers: list[str], rows: list[list[Any]], left: int = 1, blank_after: bool = True) -> None:
    """A rich table on a terminal; aligned plain text otherwise (or when `con` is None). The
    first `left` columns align left."""
    cells = [[_fmt(v) for v in r] for r in rows]
    if con is not None and con.is_terminal:
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
    if blank_after:
        print()


def _text(con, s: str) -> None:
    if con is not None and con.is_terminal:
        con.print(s, markup=False, soft_wrap=True)
    else:
        print(s)


def _hist(h: dict) -> str:
    return ", ".join(f"{k}: {v}" for k, v in h.items()) or "-"


def _rstats(s: dict) -> str:
    if not s["count"]:
        return "none"
    return f"mean {_fmt(s['mean'])}  std {_fmt(s['std'])}  min {_fmt(s['min'])}  max {_fmt(s['max'])}  (n {s['count']})"


def _step_rewards(p: dict) -> list:
    """A per-step row's raw and post-processed reward means, or "not recorded" for both."""
    from ..inspection.lineage import NOT_RECORDED

    if p["rows"] and p.get("rewards_not_recorded") == p["rows"]:
        return [NOT_RECORDED, NOT_RECORDED]
    return [p["raw_reward_mean"], p["reward_mean"]]


def _where(w: list[dict]) -> str:
    if not w:
        return "-"
    first = w[0]
    s = first["file"]
    for k in ("line", "row", "sample"):
        if k in first:
            s += f":{k} {first[k]}"
    return s + (f" (+{len(w) - 1})" if len(w) > 1 else "")


def print_inspect(result: dict, verbose: bool) -> None:
    """`inspect`'s summary, per-step table, groups and anomalies."""
    con = _console()
    s = result["summary"]
    what = "converted output" if s["input"] == "converted" else "dumps"
    _text(con, f"{s['split']} split of {what}: {s['files']} file(s), {s['steps']} step(s), {s['samples']} samples "
               f"({s['rows']} kept, {s['rejected']} rejected)")
    _text(con, f"rollouts {s['rollouts']}, prompt groups {s['prompt_groups']}")
    if s.get("pending"):
        steps = ", ".join(str(p["step"]) if p.get("step") is not None else p["path"] for p in s["pending"])
        _text(con, f"pending: {len(s['pending'])} step(s) not in the output, their input still being written when "
                   f"converted ({steps}); `convert --resume` adds them")
    t = s["tokens"]
    _text(con, f"tokens: prompt {t['prompt']}, response {t['response']}, total {t['total']}, loss-mask sum {t['mask_sum']}")
    if s.get("not_token_exact"):
        _text(con, f"not token-exact: {s['not_token_exact']} of {s['rows']} rows are a text dump tokenized by --tokenizer "
                   "(the ids the policy sampled were not recorded)")
    tpl = s.get("template")
    if tpl is not None:
        _text(con, f"chat template ({tpl['template']}): {tpl['drifting']} of {tpl['checked']} checked samples drift "
                   f"(rate {_fmt(tpl['drift_rate'])}); {tpl['not_checked']} not checked (no message-list prompt)")
        for p in tpl["per_step"]:
            _text(con, f"  step {p['step']}: drift rate {_fmt(p['drift_rate'])}; supervised tokens stored "
                       f"{p['supervised_stored']}, re-rendered {p['supervised_rendered']} "
                       f"(difference {p['supervised_difference']:+d}, share {_fmt(p['supervised_difference_share'])})")
    _text(con, f"status: {_hist(s['status'])}; truncation rate {_fmt(s['truncation_rate'])}")
    unrecorded = s.get("rewards_not_recorded", 0)
    if unrecorded and unrecorded == s["rows"]:
        _text(con, "raw_reward, reward: not recorded (the framework wrote its samples without rewards)")
    else:
        extra = f"; not recorded for {unrecorded} samples" if unrecorded else ""
        _text(con, f"raw_reward: {_rstats(s['rewards']['raw_reward'])}{extra}")
        _text(con, f"reward (post-processed): {_rstats(s['rewards']['reward'])}{extra}")
    _text(con, f"samples per rollout (size: rollouts): {_hist(s['samples_per_rollout'])}")
    _text(con, f"prompt-group sizes in rollouts (size: groups): {_hist(s['group_sizes'])}")
    if s.get("removed_samples"):
        _text(con, f"removed samples (remove_sample, left out of the loss): {s['removed_samples']}"
                   f"{'' if verbose else ' (-v lists them)'}")
    _text(con, "")
    _table(con, "per step", ["split", "step", "samples", "rejected", "rollouts", "groups", "tokens", "mask sum", "mean resp len",
                             "raw reward", "reward", "trunc rate", "zero-var groups"],
           [[p["split"], p["step"], p["samples"], p["rejected"], p["rollouts"], p["prompt_groups"], p["tokens"], p["mask_sum"],
             p["response_length_mean"], *_step_rewards(p), p["truncation_rate"], p["zero_variance_groups"]]
            for p in s["per_step"]], left=1)
    if any(p.get("weight_versions") for p in s["per_step"]):
        _table(con, "lineage (weight versions: samples holding each)", ["split", "step", "weight versions",
                                                                        "multi-version samples"],
               [[p["split"], p["step"], _hist(p["weight_versions"]), p["multi_version_samples"]] for p in s["per_step"]],
               left=3)
    if s["group_by"]:
        gb = s["group_by"]
        from ..inspection.aggregate import PER_STEP

        per_step = gb in PER_STEP  # keyed [step, id]
        key_h = f"step:{gb}" if per_step else gb
        mask_h = "rollout_mask_sum" if gb == "rollout_id" else "mask sum"
        rows = []
        for g in result["groups"]:
            key = f"{g['key'][0]}:{_fmt(g['key'][1])}" if per_step else g["key"]
            rows.append([key, g["samples"], g["rollouts"], g["prompt_groups"], g["tokens"],
                         g["rollout_mask_sum"] if gb == "rollout_id" else g["mask_sum"],
                         g["reward_mean"], g["reward_min"], g["reward_max"], g["raw_reward_mean"], g["statuses"]])
        shown = len(result["groups"])
        title = f"by {gb}: {s['groups_total']} group(s)" + (f", first {shown} shown (--limit 0 shows all)" if shown < s["groups_total"] else "")
        _table(con, title, [key_h, "samples", "rollouts", "groups", "tokens", mask_h, "reward mean", "min", "max", "raw mean", "statuses"],
               rows)
    removed = result.get("removed") or []
    if verbose and removed:
        _table(con, f"removed samples: {s['removed_samples']}, {len(removed)} listed",
               ["level", "step", "where", "rollout_id", "sample_index"],
               [[r["level"], r["step"], _where(r["where"]), r["rollout_id"], r["sample_index"]] for r in removed], left=2)
    counts = s["anomaly_counts"]
    if not counts:
        _text(con, "anomalies: none")
        return
    _text(con, "anomalies by kind: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    items = result["anomalies"]  # the most severe first, then by step (inspect_paths orders them)
    items = items if verbose else items[:TEXT_ANOMALY_LIMIT]
    total = sum(counts.values())
    levels = ", ".join(_plural(n, lv) for lv, n in s["anomaly_levels"].items())
    _table(con, f"{_plural(total, 'anomaly')}: {levels}; {len(items)} listed, most severe first"
                f"{'' if verbose else ' (-v or --json for all kept)'}",
           ["level", "kind", "step", "where", "message"],
           [[a["level"], a["kind"], a["step"], _where(a["where"]), a["message"]] for a in items], left=3)


def _plural(n: int, word: str) -> str:
    """'1 error', '2 errors', '3 anomalies'; info is uncounted ('5 info')."""
    if n == 1 or word == "info":
        return f"{n} {word}"
    return f"{n} {word[:-1]}ies" if word.endswith("y") else f"{n} {word}s"


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


def print_rollout(r: dict) -> None:
    """`inspect --show`: one rollout's samples."""
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
                   f"loss mask {smp['mask_sum']}/{smp['response_length']} trainable"
                   f"{' (remove_sample)' if smp.get('remove_sample') else ''}, runs {_runs(smp['mask_runs'])}")
        if smp["raw_reward"] is None:
            _text(con, "   reward not recorded")
        else:
            _text(con, f"   reward {_fmt(smp['reward'])} (raw {_fmt(smp['raw_reward'])})")
        if smp.get("weight_versions"):
            _text(con, f"   weight versions {', '.join(smp['weight_versions'])}")
        if r["text"]:
            _text(con, f"   prompt: {_clip(smp.get('prompt'))}")
            _text(con, f"   response: {_clip(smp.get('response'))}")
            _text(con, f"   label: {_clip(smp.get('label'))}")
        if smp.get("decoded"):
            from ..text.pieces import BOUNDARY, MASKED_CLOSE, MASKED_OPEN, render

            prompt, response = render(smp["decoded"])
            _text(con, f"   decoded (--tokenizer; tokens split by {BOUNDARY}, loss-masked spans in {MASKED_OPEN}{MASKED_CLOSE}):")
            _text(con, f"   prompt tokens: {_clip(prompt)}")
            _text(con, f"   response tokens: {_clip(response)}")
            _text(con, f"   ids: {_clip(' '.join(map(str, smp['decoded']['ids'])))}")
    for rej in r["rejected"]:
        _text(con, f"rejected: {_where([rej['where']])}: {rej['field'] or ''}{': ' if rej['field'] else ''}{rej['reason']}")


# ------------------------------------------------------------------------------------------ audit

TEXT_DIVERGENCE_LIMIT = 5  # divergences listed per step without -v


def print_audit(result: dict, verbose: bool) -> None:
    """The mismatch per step, then each step's first divergences (all kept ones with -v)."""
    con = _console() if sys.stdout.isatty() else None
    from .audit_text import divergence_lines, loss_weight_lines, rule_lines, worst_lines

    for line in rule_lines(result):  # the rules the trainer ran, first
        _text(con, line)
    s = result["summary"]
    title = (f"audit: {s['paired_steps']} paired step(s), {s['samples']} paired samples, "
             f"{s['divergences']} divergence(s)")
    rows = []
    for st in result["steps"]:
        m = st["mismatch"] or {}
        rows.append([st["step"], st["samples"]["paired"], m.get("tokens"), m.get("mean_abs_diff"), m.get("max_abs_diff"),
                     m.get("k1"), m.get("k3"), m.get("ratio_above_2"), m.get("ratio_below_0.5"), st["divergences"]])
    _table(con, title, ["step", "samples", "tokens", "mean|d|", "max|d|", "k1", "k3", ">2", "<0.5", "divergences"], rows)
    for line in worst_lines(result) + loss_weight_lines(result):
        _text(con, line)
    limit = None if verbose else TEXT_DIVERGENCE_LIMIT
    for line in divergence_lines(result, limit):
        _text(con, line)
