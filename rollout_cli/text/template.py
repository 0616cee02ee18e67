"""A chat template, rendered as `transformers`' `apply_chat_template` renders one: jinja2's
sandboxed environment with `trim_blocks` and `lstrip_blocks` on, the conversation as `messages`,
`add_generation_prompt`, the tokenizer's special tokens (`bos_token`, `eos_token`, ...) and the
`raise_exception` helper. The template is `--chat-template FILE` (a Jinja file, or a
tokenizer_config.json holding `chat_template`), else the tokenizer folder's own
(`chat_template.jinja`, else `chat_template` in its tokenizer_config.json)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import InvalidInputError, UsageError

_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token")


def _jinja():
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise UsageError("--check-template needs the `jinja2` library: pip install 'rollout-cli[text]'") from None
    return jinja2, ImmutableSandboxedEnvironment


def _token_text(v: Any) -> str | None:
    """A special token as tokenizer_config.json records it: a string, or {"content": ...}."""
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _from_config(cfg: dict, where: str) -> str | None:
    t = cfg.get("chat_template")
    if isinstance(t, list):  # named templates: the default one
        named = {e.get("name"): e.get("template") for e in t if isinstance(e, dict)}
        t = named.get("default")
    if t is not None and not isinstance(t, str):
        raise UsageError(f"{where}: chat_template: expected a Jinja template string")
    return t


@dataclass
class ChatTemplate:
    source: str  # the file it was read from (what messages name)
    text: str
    tokens: dict = field(default_factory=dict)  # bos_token, eos_token, ... -> their text
    _compiled: Any = None

    def render(self, messages: list, add_generation_prompt: bool) -> str:
        """The conversation rendered; a template error is the dump's or the template's problem,
        raised as InvalidInputError naming the template."""
        jinja2, env_cls = _jinja()
        if self._compiled is None:
            env = env_cls(trim_blocks=True, lstrip_blocks=True)

            def raise_exception(message):
                raise jinja2.exceptions.TemplateError(message)

            env.globals["raise_exception"] = raise_exception
            try:
                self._compiled = env.from_string(self.text)
            except jinja2.TemplateError as e:
                raise UsageError(f"{self.source}: not a Jinja template: {e}") from None
        try:
            return self._compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **self.tokens)
        except jinja2.TemplateError as e:
            raise InvalidInputError(f"{self.source}: rendering failed: {e}") from None


def load_template(tok, path: str | None) -> ChatTemplate:
    """The chat template to check against (see the module's docstring); a usage error when
    there is none."""
    import orjson

    cfg = tok.config()
    tokens = {k: t for k in _TOKEN_KEYS if (t := _token_text(cfg.get(k))) is not None}
    if path is not None:
        if not os.path.isfile(path):
            raise UsageError(f"--chat-template {path}: no such file")
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if path.endswith(".json"):
            try:
                own = orjson.loads(text)
            except orjson.JSONDecodeError as e:
                raise UsageError(f"--chat-template {path}: not readable as JSON: {e}") from None
            text = _from_config(own if isinstance(own, dict) else {}, path)
            if text is None:
                raise UsageError(f"--chat-template {path}: holds no chat_template")
        return ChatTemplate(path, text, tokens)
    jinja_file = os.path.join(tok.folder, "chat_template.jinja")
    if os.path.isfile(jinja_file):
        with open(jinja_file, encoding="utf-8") as f:
            return ChatTemplate(jinja_file, f.read(), tokens)
    where = os.path.join(tok.folder, "tokenizer_config.json")
    text = _from_config(cfg, where)
    if text is None:
        raise UsageError(f"--check-template: the tokenizer folder {tok.folder} holds no chat template "
                         "(chat_template.jinja or tokenizer_config.json's chat_template): pass --chat-template FILE")
    return ChatTemplate(where, text, tokens)
