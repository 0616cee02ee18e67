"""The plain lines of `audit`'s human output: divergences per step (the first ones, as other
errors are listed) and the rollouts whose loss weight moves most between aggregations."""
from __future__ import annotations

from ..audit.diff import describe


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
