"""Which of the field table's fields this DCGM knows, and the name it gives each.

Fields are addressed by ID (DCGM's stable ABI); names only cross-check the ID against the loaded bindings
and say which field is meant in logs and in ``check`` (DCGM 4.6 renamed most of them).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from types import ModuleType

from gpueff.backends.dcgm.fields import FIELDS, DcgmField

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResolvedField:
    spec: DcgmField
    field_id: int
    name: str  # the name the loaded bindings give this ID (the newest of the table's where they give none)


def resolve_fields(fields_module: ModuleType) -> tuple[list[ResolvedField], list[DcgmField]]:
    """The table's fields this DCGM knows, and those it does not: by ID first, by the names as fallback."""
    known_fields: list[ResolvedField] = []
    unknown: list[DcgmField] = []
    for spec in FIELDS:
        by_name = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # DCGM 4.6 warns on the legacy names
            for name in spec.names:
                value = getattr(fields_module, name, None)
                if isinstance(value, int):
                    by_name[name] = value
        matching = [name for name, number in by_name.items() if number == spec.field_id]
        for name, number in by_name.items():
            if number != spec.field_id:
                log.warning("the DCGM bindings define %s as %d, not %d: watching %d (IDs are DCGM's stable interface)", name, number, spec.field_id, spec.field_id)
        known = _field_known(fields_module, spec.field_id)
        if known is None:  # the bindings have no metadata lookup: their names decide
            known = bool(matching)
        if known:
            known_fields.append(ResolvedField(spec, spec.field_id, matching[0] if matching else spec.names[0]))
        else:
            unknown.append(spec)
    if unknown:
        log.info("this DCGM does not know field(s) %s: they are not exported", ", ".join(f"{spec.names[0]} ({spec.field_id})" for spec in unknown))
    return known_fields, unknown


def _field_known(fields_module: ModuleType, field_id: int) -> bool | None:
    """Whether DCGM has metadata for ``field_id``; None where the bindings cannot say."""
    lookup = getattr(fields_module, "DcgmFieldGetById", None)
    if lookup is None:
        return None
    try:
        return lookup(field_id) is not None
    except Exception:  # the lookup goes through ctypes into libdcgm; any failure means "cannot say"
        return None
