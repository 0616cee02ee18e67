"""The dataset card (README.md at OUT's root, schema version 6 on): present, of the size and
(full mode) the BLAKE3 the manifest records, like every other file. An older output has none."""
from __future__ import annotations

from .common import Report, full_path
from .files import check_bytes


def check_card(out: str, m: dict, rep: Report) -> None:
    card = m.get("card")
    if card is not None:
        check_bytes(card["path"], full_path(out, card["path"]), card, rep)
