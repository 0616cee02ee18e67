"""Chat-template drift: whether the tokens a sample stores are the tokens its conversation
re-renders to through the chat template and the tokenizer.

The prompt messages are rendered with the generation prompt and the string is encoded in one
call as the tokenizer encodes a text by default (template.py, tokenizer.py); that must be the
stored tokens before the response, `tokens[:total_length - response_length]`. Where the sample
holds the whole conversation (the prompt's messages and every later turn, assistant and tool ones
too), each later turn boundary is compared the same way: the conversation up to that turn,
rendered (with the generation prompt where an assistant turn follows), must be the start of the
stored tokens; the rendering of the whole conversation is compared over the stored length only
(its tail, after the last generated token, was never sampled). The first position that differs
is named with the turn it falls in and both tokens there, decoded.

Supervised tokens: the stored loss-mask total, and the tokens the assistant turns after the
prompt re-render to (the same total where the sample holds no later turns)."""
from __future__ import annotations

from dataclasses import dataclass

END = "(end)"  # where one of the two sequences has no token


@dataclass
class Drift:
    position: int  # the first position where stored and rendered tokens differ
    turn: int | None  # the message the position falls in (0-based); None: the generation prompt
    role: str | None
    stored: str  # the stored token there, decoded (END where the stored tokens end)
    rendered: str  # the rendered token there, decoded (END where the rendering ends)
    stored_id: int | None
    rendered_id: int | None


@dataclass
class SampleCheck:
    drift: Drift | None
    supervised_stored: int
    supervised_rendered: int


def first_difference(stored, rendered, whole: bool = True) -> int | None:
    """The first position where the two differ; with `whole` a length difference counts (at the
    shorter one's end), else only the common length is compared."""
    n = min(len(stored), len(rendered))
    for i in range(n):
        if stored[i] != rendered[i]:
            return i
    if whole and len(stored) != len(rendered):
        return n
    return None


class Renderer:
    """One template and tokenizer, with each rendered prefix of a conversation encoded once."""

    def __init__(self, template, tok):
        self.template, self.tok = template, tok
        self._cache: dict = {}

    def ids(self, messages: list, add_generation_prompt: bool) -> list[int]:
        import orjson

        key = (orjson.dumps(messages, option=orjson.OPT_SORT_KEYS), add_generation_prompt)
        got = self._cache.get(key)
        if got is None:
            if len(self._cache) > 4096:
                self._cache.clear()
            got = self._cache[key] = self.tok.encode_text(self.template.render(messages, add_generation_prompt))
        return got

    def _turn(self, conv: list, position: int) -> tuple[int | None, str | None]:
        """The message of `conv` whose rendering holds `position` (None: after the last)."""
        for j in range(len(conv)):
            if position < len(self.ids(conv[: j + 1], False)):
                return j, _role(conv[j])
        return None, None

    def _drift(self, tokens, rendered, position: int, conv: list) -> Drift:
        turn, role = self._turn(conv, position)
        s = int(tokens[position]) if position < len(tokens) else None
        r = int(rendered[position]) if position < len(rendered) else None
        return Drift(position, turn, role if turn is not None else "generation prompt",
                     self.tok.piece(s) if s is not None else END, self.tok.piece(r) if r is not None else END, s, r)

    def check(self, tokens, response_length: int, prompt: list, conversation: list | None, mask_total: int) -> SampleCheck:
        tokens = [int(t) for t in tokens]
        head = tokens[: len(tokens) - int(response_length)]
        conv = conversation if conversation and len(conversation) > len(prompt) else prompt
        drift = None
        rendered = self.ids(prompt, True)
        p = first_difference(head, rendered)
        if p is not None:
            drift = self._drift(tokens, rendered, p, conv)
        rendered_supervised = mask_total
        if conv is not prompt:
            for k in range(len(prompt) + 1, len(conv) + 1):
                if drift is not None:
                    break
                last = k == len(conv)
                rendered = self.ids(conv[:k], not last and _role(conv[k]) == "assistant")
                p = first_difference(tokens[: len(rendered)] if not last else tokens, rendered, whole=not last)
                if p is not None:
                    drift = self._drift(tokens, rendered, p, conv)
            rendered_supervised = sum(len(self.ids(conv[: k + 1], False)) - len(self.ids(conv[:k], True))
                                      for k in range(len(prompt), len(conv)) if _role(conv[k]) == "assistant")
        return SampleCheck(drift, mask_total, rendered_supervised)


def _role(message) -> str | None:
    return message.get("role") if isinstance(message, dict) else None


def messages_of(value) -> list | None:
    """A message list (a list of objects with a `role`), from a list or its JSON text; None for
    anything else (a prompt given as plain text)."""
    if isinstance(value, str):
        import orjson

        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return None
    if isinstance(value, list) and value and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value):
        return value
    return None
