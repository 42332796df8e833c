"""Write streams on a flash device: one per tenant × cache engine part.

What matters for placement is the write pattern (a log writes sequentially and frees whole
reclaim units as it wraps; set-associative buckets are rewritten at random) and the
invalidation rate: how often a stream rewrites its space, writes share / space share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lachesis_controller.contracts.engine_parts import PART_PATTERNS as PART_PATTERNS
from lachesis_controller.contracts.engine_parts import Pattern

# PART_PATTERNS: engine parts and how they write (Kangaroo: KLog is a log, KSet sets are
# rewritten in place; FairyWREN's FwLog and FwSets' hot and cold subsets are all logs on
# flash), as the stage contract says it (api-schemas/bus/common.schema.json, x-write-pattern).


@dataclass(frozen=True)
class Stream:
    tenant: str
    part: str
    space: float  # share of the device's logical space
    writes: float  # share of the device's host writes
    trimmed: bool = False  # a log that deallocates each segment before rewriting it

    @property
    def name(self) -> str:
        return f"{self.tenant}/{self.part}"

    @property
    def pattern(self) -> Pattern:
        return PART_PATTERNS[self.part]

    @property
    def invalidation_rate(self) -> float:
        return self.writes / self.space

    @property
    def log_rate(self) -> float:
        # Rates of streams sharing a handle are compared on a log scale: a stream rewriting
        # its space twice as often as another is as different from it at any scale.
        return math.log(self.invalidation_rate + 1e-12)
