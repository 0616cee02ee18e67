"""The trainer's batch streams (`open_output(OUT).iter_batches`, numpy, and
`open_dataset(OUT).iter_batches`, torch) read back as plain numpy, and digested.

`Micro` is one micro-batch as the properties look at it (its step and its per-sample and
per-token arrays as numpy, whichever backend made it); `digest` hashes a stream. Run as a
script, `python batch_streams.py OUT CONFIGS_JSON` prints the digest of every configuration
(`[{"rank", "world_size", "max_tokens", "steps", "backend"}, ...]`) as one JSON list: the
determinism property compares a fresh process's digests with its own.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass

import numpy as np

# the arrays of a micro-batch that a digest covers, and its step-wide numbers
ARRAYS = ("tokens", "cu_seqlens", "loss_mask", "response_lengths", "total_lengths", "rollout_ids",
          "rollout_positions", "rollout_mask_sums", "group_mask_sums", "group_rollouts", "group_indices",
          "remove_samples", "rewards", "raw_rewards")
SCALARS = ("step", "step_mask_sum", "step_rollouts", "step_samples", "step_groups")


def _get(batch, name: str):
    return batch[name] if isinstance(batch, dict) else getattr(batch, name)


def as_numpy(v):
    """A batch field as numpy (a torch tensor through .numpy(), on the CPU); None stays None."""
    if v is None or isinstance(v, np.ndarray):
        return v
    if hasattr(v, "detach"):  # a torch tensor; torch is not imported for the numpy backend
        return v.detach().cpu().numpy()
    return np.asarray(v)


@dataclass
class Micro:
    """One micro-batch: its step-wide numbers and arrays as numpy."""

    step: int
    scalars: dict
    arrays: dict

    @classmethod
    def of(cls, batch) -> "Micro":
        scalars = {k: int(_get(batch, k)) for k in SCALARS}
        return cls(scalars["step"], scalars, {k: as_numpy(_get(batch, k)) for k in ARRAYS})

    def __getattr__(self, name):
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(name)

    @property
    def num_samples(self) -> int:
        return int(len(self.arrays["response_lengths"]))

    @property
    def num_tokens(self) -> int:
        return int(len(self.arrays["tokens"]))

    def sample_tokens(self, i: int) -> np.ndarray:
        cu = self.arrays["cu_seqlens"]
        return self.arrays["tokens"][int(cu[i]):int(cu[i + 1])]

    def sample_mask(self, i: int) -> np.ndarray:
        rl = self.arrays["response_lengths"].astype(np.int64)
        a = int(rl[:i].sum())
        return self.arrays["loss_mask"][a:a + int(rl[i])]

    def digest(self) -> str:
        h = hashlib.blake2b(digest_size=16)
        h.update(json.dumps(self.scalars, sort_keys=True).encode())
        for k in ARRAYS:
            a = self.arrays[k]
            h.update(k.encode())
            if a is None:
                h.update(b"-")
            else:
                a = np.ascontiguousarray(a)
                h.update(str(a.dtype).encode() + str(a.shape).encode())
                h.update(a.tobytes())
        return h.hexdigest()


def open_stream(out: str, rank: int, world_size=None, max_tokens=None, steps=None, backend: str = "numpy"):
    """The iterator of `rank`'s micro-batches: the torch-free output's (backend numpy) or the
    torch dataset's (backend torch)."""
    if backend == "numpy":
        from rollout_cli.output.model import open_output

        return open_output(out).iter_batches(rank, world_size=world_size, max_tokens=max_tokens, steps=steps,
                                             backend="numpy")
    from rollout_cli.loader import open_dataset

    return open_dataset(out).iter_batches(rank, world_size=world_size, max_tokens=max_tokens, steps=steps)


def stream(out: str, rank: int, world_size=None, max_tokens=None, steps=None, backend: str = "numpy") -> list[Micro]:
    return [Micro.of(b) for b in open_stream(out, rank, world_size, max_tokens, steps, backend)]


def digest(micros: list[Micro]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for m in micros:
        h.update(m.digest().encode())
    return h.hexdigest()


def config_digest(out: str, cfg: dict) -> str:
    return digest(stream(out, cfg["rank"], cfg.get("world_size"), cfg.get("max_tokens"), cfg.get("steps"),
                         cfg.get("backend", "numpy")))


def main(argv: list[str]) -> int:
    out, configs = argv[0], json.loads(argv[1])
    print(json.dumps([config_digest(out, c) for c in configs]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
