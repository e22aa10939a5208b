"""How a raw reading becomes a catalogue value: multiply by the source's scale, and store a
blank / sentinel value as missing (None), never as a number.

Sentinels (docs/design.md, "Telemetry model", STYLE.md "not supported is a value"):

- DCGM writes "no value" into the value itself. int64 fields: DCGM_INT64_BLANK
  0x7ffffffffffffff0 and the codes above it (+1 not found, +2 not supported, +3 not
  permissioned); DCGM's own DCGM_INT64_IS_BLANK is `value >= DCGM_INT64_BLANK`. double
  fields: DCGM_FP64_BLANK 140737488355328.0 (2**47) and above. (NVIDIA/DCGM
  testing/python3/dcgmvalue.py, dcgm_structs.h.) dcgm-exporter also rejects the four 32-bit
  sentinels 0x7ffffff0..0x7ffffff3 in int64 values (dcgm-exporter isValidInt64Value); we do
  the same, accepting that those four exact values of a real counter would read as missing.
- NVML reports "no value" as an error return (NVML_ERROR_NOT_SUPPORTED and friends, see
  `NVML_MISSING_ERRORS`), and in a few structures as NVML_VALUE_NOT_AVAILABLE, all bits set
  (process usedGpuMemory). (nvidia-ml-py 13.615.71 pynvml.py.)
- NaN and infinities are missing whatever the source.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from gpufleet.domain.telemetry.vocabulary import ALL_ARCHITECTURES, Architecture, Source

DCGM_INT32_BLANK = 0x7FFFFFF0
DCGM_INT64_BLANK = 0x7FFFFFFFFFFFFFF0
DCGM_FP64_BLANK = 140737488355328.0  # 2**47
DCGM_INT32_SENTINELS = frozenset(range(DCGM_INT32_BLANK, DCGM_INT32_BLANK + 4))
NVML_VALUE_NOT_AVAILABLE_UINT = 0xFFFFFFFF
NVML_VALUE_NOT_AVAILABLE_ULONGLONG = 0xFFFFFFFFFFFFFFFF

# NVML return codes that mean "this GPU has no such value": stored as missing. Values from
# nvidia-ml-py 13.615.71. NVML_ERROR_GPU_IS_LOST (15) is deliberately absent: a lost GPU is a
# health event for the agent to report, not a missing sample.
NVML_MISSING_ERRORS = {
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NO_PERMISSION": 4,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_NO_DATA": 21,
}


def nvml_error_is_missing(return_code: int) -> bool:
    """Whether an NVML error return means the value is missing (not a failure to report)."""
    return return_code in NVML_MISSING_ERRORS.values()


Raw = int | float | None


class Encoding(StrEnum):
    """How a source encodes a value, which decides its sentinels."""

    DCGM_INT64 = "dcgm_int64"
    DCGM_FP64 = "dcgm_fp64"
    NVML_UINT = "nvml_uint"
    NVML_ULONGLONG = "nvml_ulonglong"
    NVML_DOUBLE = "nvml_double"  # GPM metrics: computed doubles, no sentinel
    FLOAT = "float"  # a Prometheus sample already in catalogue units

    def is_sentinel(self, raw: int | float) -> bool:
        # Compared with module globals: `Encoding.X` here would be an enum-class attribute
        # lookup (~0.5 µs each in 3.11), and ingest asks this once per sample.
        if self is _DCGM_INT64:
            return raw >= DCGM_INT64_BLANK or raw in DCGM_INT32_SENTINELS
        if self is _DCGM_FP64:
            return raw >= DCGM_FP64_BLANK
        if self is _NVML_UINT:
            return raw == NVML_VALUE_NOT_AVAILABLE_UINT
        if self is _NVML_ULONGLONG:
            return raw == NVML_VALUE_NOT_AVAILABLE_ULONGLONG
        return False


_DCGM_INT64, _DCGM_FP64 = Encoding.DCGM_INT64, Encoding.DCGM_FP64
_NVML_UINT, _NVML_ULONGLONG = Encoding.NVML_UINT, Encoding.NVML_ULONGLONG


def convert(raw: Raw, encoding: Encoding, scale: float) -> float | None:
    """The catalogue value of a raw reading, or None when the reading means "no value"."""
    if raw is None:
        return None
    if isinstance(raw, float) and not math.isfinite(raw):
        return None
    if encoding.is_sentinel(raw):
        return None
    return float(raw) * scale


@dataclass(frozen=True)
class NvmlSource:
    """An NVML read through nvidia-ml-py: `call`, with `constant` (a field id NVML_FI_*, a GPM
    metric NVML_GPM_METRIC_*, or an argument such as NVML_CLOCK_SM) whose value is
    `constant_id`. For a per-link family `constant` holds `{link}` and `link_constant_ids`
    the id of each link."""

    call: str
    raw_unit: str
    encoding: Encoding
    constant: str | None = None
    constant_id: int | None = None
    scale: float = 1.0
    architectures: frozenset[Architecture] = ALL_ARCHITECTURES
    per_mig: bool = False
    link_constant_ids: tuple[int, ...] = ()
    notes: str = ""

    kind = Source.NVML

    @property
    def is_gpm(self) -> bool:
        return bool(self.constant and self.constant.startswith("NVML_GPM_METRIC_"))

    def supports(self, architecture: Architecture) -> bool:
        return architecture in self.architectures

    def to_catalogue_value(self, raw: Raw) -> float | None:
        return convert(raw, self.encoding, self.scale)


@dataclass(frozen=True)
class DcgmSource:
    """A DCGM field: its name (DCGM_FI_*), numeric id, value type and raw unit. A per-link
    family names its fields with `{link}` (DCGM_FI_PROF_NVLINK_L{link}_TX_BYTES) and lists the
    id of each link in `link_field_ids`; `field_id` is then link 0's. `aliases` are older
    names of the same field id."""

    field: str
    field_id: int
    raw_unit: str
    encoding: Encoding
    scale: float = 1.0
    architectures: frozenset[Architecture] = ALL_ARCHITECTURES
    per_mig: bool = False
    aliases: tuple[str, ...] = ()
    link_field_ids: tuple[int, ...] = ()
    notes: str = ""

    kind = Source.DCGM

    def __post_init__(self) -> None:
        if self.encoding not in (Encoding.DCGM_INT64, Encoding.DCGM_FP64):
            raise ValueError(f"{self.field}: a DCGM field is int64 or double")
        if ("{link}" in self.field) != bool(self.link_field_ids):
            raise ValueError(f"{self.field}: a per-link field names {{link}} and lists ids")
        if self.link_field_ids and self.link_field_ids[0] != self.field_id:
            raise ValueError(f"{self.field}: field_id is link 0's id")

    def fields(self) -> tuple[tuple[str, int, int | None], ...]:
        """Every concrete (field name, field id, link) this source reads."""
        if not self.link_field_ids:
            return ((self.field, self.field_id, None),)
        return tuple((self.field.format(link=link), field_id, link)
                     for link, field_id in enumerate(self.link_field_ids))

    def link_of(self, field: str) -> int | None:
        """The link a concrete per-link field name belongs to, else None."""
        return next((link for name, _, link in self.fields() if name == field), None)

    def supports(self, architecture: Architecture) -> bool:
        return architecture in self.architectures

    def to_catalogue_value(self, raw: Raw) -> float | None:
        return convert(raw, self.encoding, self.scale)


@dataclass(frozen=True)
class PrometheusSource:
    """A metric's name in a Prometheus exposition. Where the name is a DCGM field name (as
    dcgm-exporter writes it, and gpufleet's agent too) the value is in the DCGM field's raw
    unit, so the DCGM scale and sentinels apply; gpufleet's own names carry catalogue units.
    """

    name: str
    raw_unit: str
    encoding: Encoding
    scale: float = 1.0
    link_names: tuple[str, ...] = ()
    notes: str = ""

    kind = Source.PROMETHEUS

    def names(self) -> tuple[str, ...]:
        """Every concrete exposition name (one per link for a per-link family)."""
        return self.link_names or (self.name,)

    def to_catalogue_value(self, raw: Raw) -> float | None:
        return convert(raw, self.encoding, self.scale)
