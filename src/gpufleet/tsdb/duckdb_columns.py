"""A question's columns handed to DuckDB as numpy arrays, not as list parameters.

DuckDB's Python client converts a list passed as a statement's parameter value by value
(~1 µs each): a project average at 10,000 GPUs passes 7,500 slots × 5 columns and the idle
list 7,500 spans × 5, which cost about as much CPU as the statements' own work (~26 ms for
three columns of 7,500, against ~3 ms as arrays: BENCHMARKS.md, "Side by side with
VictoriaMetrics"). Arrays registered on the read's cursor are scanned in place, as a
view that lives as long as the `with` block.

numpy is imported when first needed: the CLI never reaches this module, and its start-up
is measured (tests/cli/test_startup.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

_names = itertools.count()  # a view name per registration: cursors may be reused

# Column kinds → numpy dtypes.
INT32, INT64, FLOAT64 = "int32", "int64", "float64"


@contextmanager
def registered(cur, columns: dict[str, tuple[str, Sequence]]) -> Iterator[str]:
    """Register `columns` (name → (kind, values), all of one length) on `cur` as a view;
    yields its name, and drops the view on leaving."""
    import numpy as np

    name = f"gf_columns_{next(_names)}"
    cur.register(name, {column: np.arange(values.start, values.stop, values.step, dtype=kind)
                        if isinstance(values, range) else np.asarray(values, dtype=kind)
                        for column, (kind, values) in columns.items()})
    try:
        yield name
    finally:
        cur.unregister(name)
