"""Train-inference mismatch over the tokens the trainer trained on.

For one sample, with m its trainer `loss_masks` and d = (the policy that scores) - (the policy
that sampled), per response token: d = train `log_probs` - rollout `rollout_log_probs` for the
mismatch, d = `ref_log_probs` - `log_probs` against the reference. Only tokens with m = 1
count: the trainer writes 0.0 at masked positions, so counting them would pull every figure
towards "no mismatch". Per step (and per rollout), over the counted tokens:

    tokens           how many
    mean_abs_diff    mean(|d|)
    max_abs_diff     max(|d|)
    k1               mean(-d)                (the KL estimator k1 of sampler || scorer)
    k3               mean(exp(d) - 1 - d)    (k3: non-negative, lower variance)
    ratio_above_2    share of tokens with exp(d) > 2
    ratio_below_0.5  share of tokens with exp(d) < 0.5

Each figure is kept as a sum per sample, so a rollout's or step's figures combine its samples'
exactly (max by max).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

MEANING = {  # the figures, in order, with what each is (gates name them: `mismatch.k3`)
    "tokens": "tokens counted",
    "mean_abs_diff": "mean |d|",
    "max_abs_diff": "max |d|",
    "k1": "mean(-d)",
    "k3": "mean(exp(d) - 1 - d)",
    "ratio_above_2": "share of tokens with exp(d) > 2",
    "ratio_below_0.5": "share of tokens with exp(d) < 0.5",
}
KEYS = tuple(MEANING)
TOP_TOKENS = 10  # the tokens with the largest |d| kept per step
# the sums a sample contributes: tokens, sum|d|, max|d|, sum(-d), sum(k3), n above 2, n below 0.5
_N = 7


def token_sums(d: np.ndarray) -> np.ndarray:
    """The seven sums of one sample's counted differences (float64)."""
    if not len(d):
        return np.zeros(_N)
    a = np.abs(d)
    r = np.exp(d)
    return np.array([len(d), a.sum(), a.max(), -d.sum(), (np.expm1(d) - d).sum(),
                     np.count_nonzero(r > 2.0), np.count_nonzero(r < 0.5)], dtype=np.float64)


def combine(sums: np.ndarray) -> np.ndarray:
    """Rows of token_sums combined into one (sums added, max by max)."""
    if not len(sums):
        return np.zeros(_N)
    out = sums.sum(axis=0)
    out[2] = sums[:, 2].max()
    return out


def figures(s: np.ndarray) -> dict:
    """The mismatch object (KEYS) of combined sums; figures are null where no token counted."""
    n = int(s[0])
    if n == 0:
        return {k: (0 if k == "tokens" else None) for k in KEYS}
    return {"tokens": n, "mean_abs_diff": _f(s[1] / n), "max_abs_diff": _f(s[2]), "k1": _f(s[3] / n),
            "k3": _f(s[4] / n), "ratio_above_2": float(s[5] / n), "ratio_below_0.5": float(s[6] / n)}


def _f(x) -> float | None:
    """A figure; null where an infinite log-prob made it infinite or undefined (JSON has neither)."""
    x = float(x)
    return x if np.isfinite(x) else None


def direct(d: np.ndarray) -> dict:
    """The same figures straight from all counted differences at once (what the tests hold the
    per-sample sums to)."""
    return figures(token_sums(np.asarray(d, dtype=np.float64)))


@dataclass
class Pair:
    """One comparison (mismatch, or reference) accumulated over a step's samples."""

    scorer_key: str  # the field d is taken from (train log_probs; ref_log_probs)
    sampler_key: str  # the field subtracted (rollout_log_probs; log_probs)
    sums: dict[int, np.ndarray] = field(default_factory=dict)  # rollout position -> token_sums
    top: list = field(default_factory=list)  # heap of (|d|, position, token, d, scorer, sampler)

    def add(self, pos: int, scorer: np.ndarray, sampler: np.ndarray, mask: np.ndarray) -> None:
        """A sample's counted tokens: d = scorer - sampler where mask is 1."""
        keep = np.flatnonzero(mask)
        d = scorer[keep].astype(np.float64) - sampler[keep].astype(np.float64)
        self.sums[pos] = token_sums(d)
        if not len(d):
            return
        a = np.abs(d)
        k = min(TOP_TOKENS, len(a))
        idx = np.argpartition(-a, k - 1)[:k] if k < len(a) else np.arange(len(a))
        for j in idx.tolist():
            item = (float(a[j]), -pos, -int(keep[j]), float(d[j]), float(scorer[keep[j]]), float(sampler[keep[j]]))
            if len(self.top) < TOP_TOKENS:
                heapq.heappush(self.top, item)
            elif item > self.top[0]:
                heapq.heapreplace(self.top, item)

    def step(self) -> dict | None:
        """The step's figures and its top tokens, or None when no sample had both sides."""
        if not self.sums:
            return None
        out = figures(combine(np.array(list(self.sums.values()))))
        out["top_tokens"] = [
            {"rollout_position": -p, "token": -t, "d": _f(d), "abs_diff": _f(a), self.scorer_key: _f(sc), self.sampler_key: _f(sa)}
            for a, p, t, d, sc, sa in sorted(self.top, reverse=True)
        ]
        return out

    def by_rollout(self, rollout_of: dict[int, int]) -> dict[int, dict]:
        """Figures per rollout id (`rollout_of`: position -> rollout id)."""
        groups: dict[int, list] = {}
        for pos, s in self.sums.items():
            groups.setdefault(rollout_of.get(pos, -1), []).append(s)
        return {rid: figures(combine(np.array(v))) for rid, v in groups.items()}


@dataclass
class TokenStats:
    """Mean, std, min and max of one per-token field over the counted tokens."""

    name: str
    n: int = 0
    total: float = 0.0
    squares: float = 0.0
    lo: float = float("inf")
    hi: float = float("-inf")

    def add(self, values: np.ndarray, mask: np.ndarray) -> None:
        v = values[mask.astype(bool)].astype(np.float64)
        if not len(v):
            return
        self.n += len(v)
        self.total += float(v.sum())
        self.squares += float(np.square(v).sum())
        self.lo = min(self.lo, float(v.min()))
        self.hi = max(self.hi, float(v.max()))

    def result(self) -> dict | None:
        if not self.n:
            return None
        mean = self.total / self.n
        var = max(self.squares / self.n - mean * mean, 0.0)
        return {"tokens": self.n, "mean": mean, "std": float(np.sqrt(var)), "min": self.lo, "max": self.hi}
