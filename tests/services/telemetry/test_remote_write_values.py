"""A body's values converted as a column: `convert`'s answer for every float, sentinels,
NaN and infinities included."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.telemetry.sources import (
    DCGM_FP64_BLANK,
    DCGM_INT32_SENTINELS,
    DCGM_INT64_BLANK,
    NVML_VALUE_NOT_AVAILABLE_UINT,
    NVML_VALUE_NOT_AVAILABLE_ULONGLONG,
    Encoding,
    convert,
)
from gpufleet.services.telemetry.remote_write_values import ENCODING_CODES, catalogue_values

EDGES = [float(n) for n in (DCGM_INT64_BLANK, DCGM_FP64_BLANK, NVML_VALUE_NOT_AVAILABLE_UINT,
                            NVML_VALUE_NOT_AVAILABLE_ULONGLONG, *DCGM_INT32_SENTINELS)]
RAWS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGES),
    st.sampled_from(EDGES).map(lambda f: math.nextafter(f, -math.inf)),
    st.sampled_from(EDGES).map(lambda f: math.nextafter(f, math.inf)))
SAMPLES = st.lists(st.tuples(RAWS, st.sampled_from(list(Encoding)),
                             st.sampled_from([1.0, 0.01, 100.0, 1e-6, 1048576.0])),
                   max_size=40)


@given(SAMPLES)
def test_the_column_is_converted_as_convert_converts_each_sample(samples):
    raws = np.array([raw for raw, _, _ in samples], dtype=np.float64)
    codes = np.array([ENCODING_CODES[encoding] for _, encoding, _ in samples], dtype=np.int8)
    scales = np.array([scale for _, _, scale in samples], dtype=np.float64)
    expected = [convert(raw, encoding, scale) for raw, encoding, scale in samples]
    got = catalogue_values(raws, codes, scales)
    assert got == expected
    assert all(type(v) in (float, type(None)) for v in got)


def test_sentinels_are_no_value_and_the_rest_scaled():
    raws = np.array([float(DCGM_INT64_BLANK), 2147483632.0, 42.0, DCGM_FP64_BLANK, 5.0, math.nan])
    codes = np.array([ENCODING_CODES[e] for e in (
        Encoding.DCGM_INT64, Encoding.DCGM_INT64, Encoding.DCGM_INT64, Encoding.DCGM_FP64,
        Encoding.DCGM_FP64, Encoding.FLOAT)], dtype=np.int8)
    got = catalogue_values(raws, codes, np.array([1.0, 1.0, 0.5, 1.0, 100.0, 1.0]))
    assert got == [None, None, 21.0, None, 500.0, None]
