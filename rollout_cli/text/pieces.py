"""Token ids shown as text: each token's own decoded piece, so its boundaries stay visible, with
the part it plays (prompt, trained response token, masked response token). What `inspect --show`
and the report's drill-down put beside the ids."""
from __future__ import annotations

BOUNDARY = "│"  # between tokens in the console rendering
MASKED_OPEN, MASKED_CLOSE = "⟦", "⟧"  # around a run of response tokens with loss mask 0
PROMPT, TRAINED, MASKED = "prompt", "trained", "masked"


def decoded(tok, tokens, response_length: int, loss_mask) -> dict:
    """`{"ids", "pieces", "roles"}`: per token its id, its decoded piece (special tokens kept) and
    its role: `prompt` before the response, then `trained` or `masked` by the loss mask."""
    ids = [int(t) for t in tokens]
    p0 = len(ids) - int(response_length)
    mask = list(loss_mask) if loss_mask is not None else [1] * int(response_length)
    roles = [PROMPT] * p0 + [TRAINED if m else MASKED for m in mask]
    return {"ids": ids, "pieces": [tok.piece(i) for i in ids], "roles": roles[:len(ids)]}


def _visible(piece: str) -> str:
    return piece.replace("\n", "\\n").replace("\t", "\\t").replace(BOUNDARY, "|")


def render(view: dict) -> tuple[str, str]:
    """(prompt, response) as text with a boundary between tokens and each masked span of the
    response between ⟦ and ⟧."""
    prompt, resp = [], []
    open_ = False
    for piece, role in zip(view["pieces"], view["roles"]):
        text = _visible(piece)
        if role == PROMPT:
            prompt.append(text)
            continue
        if role == MASKED and not open_:
            text, open_ = MASKED_OPEN + text, True
        elif role == TRAINED and open_:
            resp[-1] += MASKED_CLOSE
            open_ = False
        resp.append(text)
    if open_ and resp:
        resp[-1] += MASKED_CLOSE
    return BOUNDARY.join(prompt), BOUNDARY.join(resp)
