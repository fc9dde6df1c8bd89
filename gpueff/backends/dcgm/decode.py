"""Turning one DCGM field value into a number, or the reason there is none.

DCGM marks a missing value two ways: a status other than OK, or a blank sentinel in the value itself
with status OK (``DCGM_*_BLANK`` and the NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED values above it).
A lost GPU and paused profiling both read as the latter. Neither is ever a number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpueff.backends.base import text
from gpueff.backends.dcgm.bindings import Bindings

OK, BLANK, STALE = "ok", "blank", "stale"


@dataclass
class FieldReading:
    """The last raw reading of one field on one GPU, for ``check``."""

    value: float | None
    status: str  # "ok", "blank", "stale", "paused", or why there is no value (a DCGM_ST_* name)


class Decoder:
    def __init__(self, bindings: Bindings, status_name: Callable[[Any], str]) -> None:
        self.ok = bindings.structs.DCGM_ST_OK
        self.double = bindings.fields.DCGM_FT_DOUBLE
        self.integers = (bindings.fields.DCGM_FT_INT64, bindings.fields.DCGM_FT_TIMESTAMP)
        self.string = bindings.fields.DCGM_FT_STRING
        self.string_blank = bindings.value.DCGM_STR_IS_BLANK
        self.double_blank = bindings.value.DCGM_FP64_IS_BLANK
        self.int64_blank = bindings.value.DCGM_INT64_IS_BLANK
        self.status_name = status_name

    def __call__(self, raw: Any) -> tuple[float | None, str]:
        """A field value's number and status; DCGM's blank sentinels are BLANK, never a number."""
        if raw.status != self.ok:
            return None, self.status_name(raw.status)
        kind = chr(raw.fieldType)
        if kind == self.double:
            number = float(raw.value.dbl)
            return (None, BLANK) if self.double_blank(number) else (number, OK)
        if kind in self.integers:
            whole = int(raw.value.i64)
            return (None, BLANK) if self.int64_blank(whole) else (float(whole), OK)
        return None, f"unexpected field type {kind!r}"

    def text(self, raw: Any) -> str | None:
        """A string field's value; None where it is blank, failed or not a string."""
        if raw.status != self.ok or chr(raw.fieldType) != self.string:
            return None
        value = text(bytes(raw.value.str).split(b"\0", 1)[0])
        return None if not value or self.string_blank(value) else value


def int32_or_none(value: Any, value_module: Any) -> float | None:
    """A number from a device-attributes struct, None where DCGM left it blank."""
    if value is None or value_module.DCGM_INT32_IS_BLANK(int(value)):
        return None
    return float(value)
