"""The dataset card (README.md at OUT's root, schema version 6 on): present, of the size and
(full mode) the BLAKE3 the manifest records, like every other file. An older output has none.

On an object store the commit PUTs the manifest, then the card (output/commit.RemoteStaging):
a commit cut off between the two leaves the previous commit's card (or none) beside a complete
manifest. That card is noted, not failed: the data is the manifest's, and the next convert of
OUT writes the card again."""
from __future__ import annotations

from ..core import storage
from .common import Report, full_path
from .files import check_bytes


def check_card(out: str, m: dict, rep: Report) -> None:
    card = m.get("card")
    if card is None:
        return
    before = len(rep.failures)
    if not check_bytes(card["path"], full_path(out, card["path"]), card, rep) and storage.is_uri(out):
        found = "; ".join(f["detail"] for f in rep.failures[before:])
        del rep.failures[before:]
        rep.notes.append(f"{card['path']}: not this manifest's dataset card ({found}): a commit cut off between "
                         "its manifest and its card; the next convert of OUT writes it")
