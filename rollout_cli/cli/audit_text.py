"""The plain lines of `audit`'s human output: divergences per step (the first ones, as other
errors are listed) and the rollouts whose loss weight moves most between aggregations."""
from __future__ import annotations

from ..auditing.diff import describe


def divergence_lines(result: dict, limit: int | None) -> list[str]:
    """Per step with divergences: a header, its first `limit` records, and how many more."""
    out: list[str] = []
    listed: dict[int, list[dict]] = {}
    for r in result["divergences"]:
        listed.setdefault(r["step"], []).append(r)
    for st in result["steps"]:
        n = st["divergences"]
        if not n:
            continue
        fields = ", ".join(f"{k} {v}" for k, v in st["divergences_by_field"].items())
        out.append(f"step {st['step']}: {n} divergence(s) ({fields})")
        recs = listed.get(st["step"], [])
        shown = recs if limit is None else recs[:limit]
        out.extend(f"  {describe(r)}" for r in shown)
        if n > len(shown):
            out.append(f"  ... and {n - len(shown)} more (--json lists them; -v shows all kept)")
    return out


def loss_weight_lines(result: dict) -> list[str]:
    """Per step: the rollout whose share moves most between the aggregations."""
    out = []
    for st in result["steps"]:
        lw = st.get("loss_weight")
        if not lw or not lw["movers"]:
            continue
        m = lw["movers"][0]
        lo = min(m["share"], key=m["share"].get)
        hi = max(m["share"], key=m["share"].get)
        out.append(f"step {st['step']}: loss weight moves most for rollout {m['rollout_id']}: "
                   f"{m['share'][lo]:.3g} of the step ({lo}) to {m['share'][hi]:.3g} ({hi})")
    return out


def _share_move(lw: list[dict]) -> str:
    """The rollout whose loss-weight share moves most between the two id rules, in words."""
    if not lw:
        return "no rollout's loss weight moves (the same samples form each rollout)"
    r = lw[0]
    mode = max(r["share"], key=lambda m: abs(r["trainer_share"][m] - r["share"][m]))
    more = f" (and {len(lw) - 1} more rollout(s))" if len(lw) > 1 else ""
    return (f"rollout {r['rollout_id']} (positions {_positions(r['positions'])}) carries "
            f"{r['trainer_share'][mode]:.3g} of the step's loss weight ({mode}) instead of {r['share'][mode]:.3g}{more}")


def _positions(ps: list, limit: int = 6) -> str:
    return ", ".join(map(str, ps[:limit])) + (", ..." if len(ps) > limit else "")


def rule_lines(result: dict) -> list[str]:
    """One line per step and field whose trainer ran another rule than the expected one: the
    rule, its source, how many samples it changed and what that cost."""
    out = []
    for e in result.get("rules", []):
        head = (f"step {e['step']}: {e['field']}: the trainer ran {e['trainer_rule']} ({e['source']}"
                + (f"; {e['case']}" if e.get("case") else "") + f"), not {e['expected_rule']}: "
                f"{e['samples']} sample(s) differ (positions {_positions(e['positions'])})")
        cost = e["cost"]
        if e["field"] == "reward":
            head += f", max |delta| {e['max_abs_delta']:.3g}" if e.get("max_abs_delta") is not None else ""
            flips = cost["advantage_sign_changes"]
            head += f"; {len(flips)} advantage(s) change sign" + (f" (positions {_positions(flips)})" if flips else "")
            mixed = cost["groups_normalised_with_others"]
            if mixed:
                head += f"; prompt groups {_positions(mixed)} normalised together with other prompts' samples"
        else:
            head += "; " + _share_move(cost["loss_weight"])
        out.append(head)
    return out


WORST = 3  # rollouts and tokens named per step


def worst_lines(result: dict) -> list[str]:
    """Per step: the rollouts and the tokens with the largest |d| (position, token index, both
    log-probs)."""
    out = []
    for st in result["steps"]:
        m = st.get("mismatch") or {}
        tops = m.get("top_tokens") or []
        ranked = sorted((r for r in st.get("rollouts", []) if r.get("mismatch") and r["mismatch"].get("max_abs_diff") is not None),
                        key=lambda r: (-r["mismatch"]["max_abs_diff"], r["rollout_id"]))[:WORST]
        if ranked:
            out.append(f"step {st['step']}: largest |d| in rollouts " + ", ".join(
                f"{r['rollout_id']} (max {r['mismatch']['max_abs_diff']:.3g}, mean {r['mismatch']['mean_abs_diff']:.3g})"
                for r in ranked))
        for t in tops[:WORST]:
            out.append(f"  position {t['rollout_position']} token {t['token']} (rollout {t.get('rollout_id')}): "
                       f"|d| {_g(t['abs_diff'])}, log_probs {_g(t['log_probs'])}, rollout_log_probs {_g(t['rollout_log_probs'])}")
    return out


def _g(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"
