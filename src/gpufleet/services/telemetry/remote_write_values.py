"""A remote-write body's raw values in catalogue units, every sample at once.

`Encoding`'s sentinels and a source's scale are what `sources.convert` applies to one raw
reading; a Prometheus body holds thousands, each a float64 already in a numpy column, so
the same rule is applied to the column (a few numpy passes) instead of two Python calls a
sample. The answer is the same as `convert`'s for every float: the thresholds are given as
the floats that compare with a float exactly as the integer thresholds do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpufleet.domain.telemetry.sources import (
    DCGM_FP64_BLANK,
    DCGM_INT32_SENTINELS,
    DCGM_INT64_BLANK,
    NVML_VALUE_NOT_AVAILABLE_UINT,
    NVML_VALUE_NOT_AVAILABLE_ULONGLONG,
    Encoding,
)


def _float_at_least(threshold: int | float) -> float:
    """The smallest float f with `x >= f` ⇔ `x >= threshold` for every float x."""
    f = float(threshold)
    return math.nextafter(f, math.inf) if f < threshold else f


def _float_equal_to(number: int) -> float:
    """The float equal to `number`, or NaN (equal to no float) where none is."""
    f = float(number)
    return f if f == number else math.nan


_INT64_BLANK = _float_at_least(DCGM_INT64_BLANK)
_FP64_BLANK = _float_at_least(DCGM_FP64_BLANK)
_INT32_SENTINELS = np.array([_float_equal_to(n) for n in sorted(DCGM_INT32_SENTINELS)])
_UINT_NA = _float_equal_to(NVML_VALUE_NOT_AVAILABLE_UINT)
_ULONGLONG_NA = _float_equal_to(NVML_VALUE_NOT_AVAILABLE_ULONGLONG)

# Encodings as small integers, for a per-sample numpy column of them.
ENCODING_CODES = {encoding: code for code, encoding in enumerate(Encoding)}
_CODE = ENCODING_CODES


def catalogue_values(raws: np.ndarray, encoding_codes: np.ndarray,
                     scales: np.ndarray) -> list[float | None]:
    """Each float64 raw reading × its scale, None where `convert` says "no value" (NaN,
    ±inf, the encoding's sentinels): `encoding_codes` (`ENCODING_CODES`) and `scales` are
    per sample."""
    values, missing = catalogue_columns(raws, encoding_codes, scales)
    if not missing.any():
        return values.tolist()
    answer: Sequence = values.astype(object)
    answer[missing] = None
    return answer.tolist()


def catalogue_columns(raws: np.ndarray, encoding_codes: np.ndarray,
                      scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`catalogue_values` as columns: the values (float64; where `missing`, whatever the
    raw reading times its scale is) and the mask of "no value"."""
    missing = ~np.isfinite(raws)
    for code, mask in (
            (_CODE[Encoding.DCGM_INT64],
             lambda r: (r >= _INT64_BLANK) | np.isin(r, _INT32_SENTINELS)),
            (_CODE[Encoding.DCGM_FP64], lambda r: r >= _FP64_BLANK),
            (_CODE[Encoding.NVML_UINT], lambda r: r == _UINT_NA),
            (_CODE[Encoding.NVML_ULONGLONG], lambda r: r == _ULONGLONG_NA)):
        of_code = encoding_codes == code
        if of_code.any():
            missing |= of_code & mask(raws)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and ±inf are `missing`
        values = raws * scales
    return values, missing
