"""The run's tokenizer, from a local `tokenizer.json` (or a folder holding one) through the
`tokenizers` library: no network, no `transformers`. One owner of how text becomes token ids:
a prompt is encoded as the tokenizer encodes a text by default (its post-processor adds what it
adds, a BOS token for most), a response on its own without added special tokens."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import UsageError

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"  # where a Hugging Face tokenizer folder keeps its chat template
_EXTRA = "pip install 'rollout-cli[text]'"


def tokenizers_module():
    """The `tokenizers` library, or a usage error naming the extra that installs it."""
    try:
        import tokenizers
    except ImportError:
        raise UsageError(f"--tokenizer needs the `tokenizers` library: {_EXTRA}") from None
    return tokenizers


def resolve(path: str) -> str:
    """The tokenizer.json a --tokenizer PATH names: the file itself, or the one in a folder."""
    if os.path.isdir(path):
        f = os.path.join(path, TOKENIZER_FILE)
        if not os.path.isfile(f):
            raise UsageError(f"--tokenizer {path}: the folder holds no {TOKENIZER_FILE}")
        return f
    if not os.path.isfile(path):
        raise UsageError(f"--tokenizer {path}: no such file or directory")
    return path


def file_digest(path: str) -> str:
    """The blake3 digest of the tokenizer.json a --tokenizer PATH names (what the manifest
    records); no `tokenizers` import."""
    from ..core.hashing import file_digest as digest

    return digest(resolve(path))


@dataclass
class Tokenizer:
    """A loaded tokenizer: the `tokenizers.Tokenizer`, the file it came from and its digest."""

    file: str
    digest: str  # blake3 of tokenizer.json (recorded in the manifest)
    tok: Any
    _image_token: tuple | None = field(default=None, init=False, repr=False, compare=False)  # (id or None,)

    @property
    def folder(self) -> str:
        return os.path.dirname(os.path.abspath(self.file))

    def record(self) -> dict:
        """What the manifest records of it."""
        return {"path": self.file, "blake3": self.digest}

    def encode_pairs(self, prompts: list[str], responses: list[str]) -> list[tuple[list[int], int]]:
        """(tokens, response_length) for each (prompt, response): the prompt as a text is encoded by
        default, then the response on its own without special tokens. Each distinct prompt is
        encoded once (a prompt group repeats it); both sides go through `encode_batch`."""
        distinct = list(dict.fromkeys(prompts))
        ids = {p: e.ids for p, e in zip(distinct, self.tok.encode_batch(distinct, add_special_tokens=True))}
        resp = self.tok.encode_batch(responses, add_special_tokens=False)
        return [(ids[p] + r.ids, len(r.ids)) for p, r in zip(prompts, resp)]

    def encode_text(self, text: str) -> list[int]:
        """A whole text, encoded in one call as the tokenizer encodes a text by default (special
        tokens spelled in it become special tokens)."""
        return self.tok.encode(text, add_special_tokens=True).ids

    def piece(self, token_id: int) -> str:
        """One token's text as decoded on its own (special tokens kept)."""
        return self.tok.decode([int(token_id)], skip_special_tokens=False)

    def decode(self, ids) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def config(self) -> dict:
        """The folder's tokenizer_config.json ({} when there is none)."""
        import orjson

        p = os.path.join(self.folder, CONFIG_FILE)
        if not os.path.isfile(p):
            return {}
        try:
            with open(p, "rb") as f:
                cfg = orjson.loads(f.read())
        except (OSError, orjson.JSONDecodeError) as e:
            raise UsageError(f"{p}: not readable as JSON: {e}") from None
        return cfg if isinstance(cfg, dict) else {}


    def image_token_id(self) -> int | None:
        """The id of the processor's image placeholder token among the tokenizer's added tokens:
        the one tokenizer_config.json names (`image_token`, top level or in
        `extra_special_tokens`, as transformers saves a processor's), else the first of
        IMAGE_PLACEHOLDERS the tokenizer adds; None when it adds none. Looked up once."""
        if self._image_token is None:
            self._image_token = (self._find_image_token(),)
        return self._image_token[0]

    def _find_image_token(self) -> int | None:
        cfg = self.config()
        extra = cfg.get("extra_special_tokens")
        named = cfg.get("image_token") or (extra.get("image_token") if isinstance(extra, dict) else None)
        added = {t.content: i for i, t in self.tok.get_added_tokens_decoder().items()}
        for name in ([named] if isinstance(named, str) else []) + list(IMAGE_PLACEHOLDERS):
            if name in added:
                return int(added[name])
        return None


# image placeholder tokens of common vision-language processors: Qwen2-VL / Qwen2.5-VL / Qwen3-VL
# (`<|image_pad|>`), LLaVA (`<image>`), Gemma 3 (`<image_soft_token>`), InternVL (`<IMG_CONTEXT>`)
IMAGE_PLACEHOLDERS = ("<|image_pad|>", "<image>", "<image_soft_token>", "<IMG_CONTEXT>")


def image_rule(opts) -> tuple[int, int] | None:
    """The image placeholder rule's (token id, spatial merge size) of RuleOptions `opts`: its
    --image-token-id, else, with --tokenizer, the tokenizer's image placeholder token
    (Tokenizer.image_token_id); None when neither gives one."""
    rule = opts.image_rule()
    if rule is not None or not opts.tokenizer:
        return rule
    tid = load(opts.tokenizer).image_token_id()
    return None if tid is None else (tid, opts.spatial_merge_size)


_LOADED: dict[str, Tokenizer] = {}


def load(path: str) -> Tokenizer:
    """The tokenizer a --tokenizer PATH names, loaded once per process. A usage error (exit 2)
    names a path that holds none, or a file `tokenizers` cannot read."""
    f = resolve(path)
    key = os.path.realpath(f)
    got = _LOADED.get(key)
    if got is not None:
        return got
    tk = tokenizers_module()
    from ..core.hashing import bytes_digest

    try:
        with open(f, "rb") as fh:
            data = fh.read()
        tok = tk.Tokenizer.from_str(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError, Exception) as e:  # tokenizers raises its own Exception type
        raise UsageError(f"--tokenizer {f}: not a tokenizer the `tokenizers` library reads: {e}") from None
    got = _LOADED[key] = Tokenizer(f, bytes_digest(data), tok)
    return got
