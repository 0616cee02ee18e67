"""What every reader yields: parsed records with their source locations."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..core.errors import Location, Problem


@dataclass
class RawChunk:
    """A run of consecutive records from one input file.

    ``records[i]`` is the sample dict, or None when the record could not be parsed at all;
    ``problems`` then holds why, keyed by the record's position in this chunk.
    """

    source: str
    kind: str  # "line" (JSONL, 1-based), "row" (Parquet, 0-based), "sample" (.pt, 0-based)
    numbers: list[int]
    records: list
    problems: dict[int, Problem] = field(default_factory=dict)

    def location(self, i: int) -> Location:
        return Location(self.source, self.kind, self.numbers[i])

    def __len__(self) -> int:
        return len(self.records)
