"""The hand-written part of the bus models (`bus_models.py` is generated from
api-schemas/bus/*.schema.json by `gen_bus_models`): what datamodel-code-generator cannot write
from a JSON Schema, and the checks a JSON Schema cannot say.

- `BusModel`, the base of every bus model: strict (the agent's serde types take no "1" for
  1 either), unknown fields refused (the schemas say `additionalProperties: false`), names
  and aliases both accepted, and `dump()`, which leaves out what the message left out so a
  fixture round-trips byte for byte.
- `Absent[T]`: an optional field the schema allows no null in. The generator writes
  `T | None = None` for every optional field; for one whose schema has no null it writes
  `Absent[T]`, which validates as `T` (an explicit null is refused, as the JSON Schema
  refuses it) while the type checker sees `T | None`, which the field is once parsed.
- `Timestamp`: a date-time kept as the string that was sent. The generator would parse it
  into a datetime, and re-rendering "10:01:00.250Z" gives "10:01:00.250000Z", which breaks
  the round trip agents rely on.
- Checks no JSON Schema keyword says, or none the library turns into pydantic: field checks
  (`uniqueItems`, a byte range's end after its start, one miss ratio per size), which the
  generator attaches to the fields, and `RateLimitStageRules`, the one model-level check,
  which it makes the class's base. The agent's serde types check the same.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Self, TypeAlias, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, model_validator

# RFC 3339 date-time; fromisoformat alone would also take a date without time or a naive time.
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse_timestamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("z", "Z").replace("t", "T"))


def _check_timestamp(value: str) -> str:
    if not _RFC3339.fullmatch(value):
        raise ValueError("must be an RFC 3339 date-time with a time zone, e.g. 2026-11-21T10:00:00Z")
    try:
        parse_timestamp(value)
    except ValueError as exc:
        raise ValueError(f"not a valid date-time: {exc}") from None
    return value


Timestamp = Annotated[str, AfterValidator(_check_timestamp)]

_T = TypeVar("_T")
_ABSENT = "absent: None only as the unset default"
if TYPE_CHECKING:
    Absent: TypeAlias = _T | None
else:
    Absent = Annotated[_T, _ABSENT]


def _no_absent_defaults(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """The JSON Schema pydantic writes for a model (the REST API's and the policy document's)
    without `"default": null` on an Absent field, whose type has no null to default to."""
    for name, field in model.model_fields.items():
        if _ABSENT in field.metadata:
            schema.get("properties", {}).get(field.alias or name, {}).pop("default", None)


class BusModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        # JSON has no infinity or NaN; a float field takes neither from Python either.
        allow_inf_nan=False,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        json_schema_extra=_no_absent_defaults,
    )

    def dump(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


# Field checks the generator attaches (the library's `validators` option: a field_validator
# per field that calls the function), so an error names the field, as the REST API's 422 does.


def unique_items(items: list[Any] | None, info: ValidationInfo) -> list[Any] | None:
    """The schemas' `uniqueItems`, which pydantic has no constraint for (the generator gives it
    to every field whose schema says it)."""
    if items is not None and len(set(items)) != len(items):
        raise ValueError(f"{info.field_name} must not repeat an item")
    return items


def end_after_start(end: int, info: ValidationInfo) -> int:
    start = info.data.get("start")
    if start is not None and end <= start:
        raise ValueError(f"end ({end}) must be greater than start ({start})")
    return end


def one_miss_ratio_per_size(ratios: list[float], info: ValidationInfo) -> list[float]:
    sizes = info.data.get("sizes")
    if sizes is not None and len(sizes) != len(ratios):
        raise ValueError(f"{len(ratios)} miss ratios for {len(sizes)} sizes")
    return ratios


class RateLimitStageRules(BusModel):
    """The base of RateLimitStageConfig. The schema's top-level anyOf says "one of these is set"
    as four alternatives, which the generator would turn into four classes; one check here."""

    @model_validator(mode="after")
    def _something_set(self) -> Self:
        # Fields of the generated subclass.
        iops, bytes_per_s = getattr(self, "iops"), getattr(self, "bytes_per_s")
        reserved, priority = getattr(self, "min_bytes_per_s"), getattr(self, "priority")
        if iops is None and bytes_per_s is None and reserved is None and priority is None:
            raise ValueError("set iops, bytes_per_s, min_bytes_per_s or priority")
        if reserved is not None and bytes_per_s is not None and reserved > bytes_per_s:
            raise ValueError("min_bytes_per_s is above bytes_per_s")
        return self
