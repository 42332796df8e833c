"""Generated from api-schemas/bus/common.schema.json by
`python -m lachesis_controller.contracts.gen_engine_parts`: do not edit."""

from typing import Literal

Pattern = Literal["sequential", "random"]

# Engine -> the write streams (engine parts) it has on flash.
ENGINE_PARTS: dict[str, tuple[str, ...]] = {
    "dram": (),
    "loc": ("loc",),
    "kangaroo": ("klog", "kset"),
    "hybrid": ("klog", "kset", "loc"),
    "fairywren": ("fwlog", "fwsets", "fwcold"),
    "hybrid-fairywren": ("fwlog", "fwsets", "fwcold", "loc"),
}

# Engine part -> how it writes: a log (sequential) or sets rewritten in place (random).
PART_PATTERNS: dict[str, Pattern] = {
    "loc": "sequential",
    "klog": "sequential",
    "kset": "random",
    "set-assoc": "random",
    "fwlog": "sequential",
    "fwsets": "sequential",
    "fwcold": "sequential",
}
