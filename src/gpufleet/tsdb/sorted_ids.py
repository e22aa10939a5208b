"""Looking ids up in a sorted numpy array: where each one stands, and whether it is there.

The telemetry store's in-memory caches keep the series they hold as a sorted id array
(numpy, not a dict of 10,000 Python ints: no objects for the garbage collector to walk) and
look a query's ids up in it by `numpy.searchsorted`; this is that look-up, once.
"""

from __future__ import annotations


def places_in_sorted(sorted_ids, ids) -> tuple:
    """(index, found) arrays for `ids` in `sorted_ids` (ascending): where an id stands
    there, and whether it is that id (an index where it is not is clipped into range and
    means nothing)."""
    import numpy as np  # as duckdb_columns: not at import

    ids = np.asarray(ids)
    if not len(sorted_ids):
        return np.zeros(len(ids), dtype=np.int64), np.zeros(len(ids), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_ids, ids), len(sorted_ids) - 1)
    return at, sorted_ids[at] == ids
