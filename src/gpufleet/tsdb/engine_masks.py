"""The funnel's minute masks computed inside VictoriaMetrics, and recorded back into it.

Folding the engine's 1-minute means in Python costs ~2.3 µs of CPU per point, and a 24-hour
funnel reads 60 points per unit, signal and hour: ~11 CPU-minutes for a replica starting cold
at 100,000 GPUs. Here the engine folds them: per half hour and signal, one instant query
whose subquery `[30m:1m]` gives each series' 30 minutes as one integer, a base-3 digit per
minute (0: no value, 1: a value below the threshold, 2: at or above it; for presence
signals 1: present):

    sum_over_time((((avg_over_time(x[60s] offset 1ms) >= bool T) + 1)
                   * 3^((((time() - 60) % 3600) / 60) - base))[30m:1m])

evaluated at the half's end. Each subquery step `t` (a whole minute) holds the minute
[t − 60 s, t): `x[60s] offset 1ms` is the window (t − 60 s − 1 ms, t − 1 ms], exactly the
minute the store's range fetch reads (`avg_over_time(x[60000ms])` at b + 60 s − 1 ms), and
`(time() − 60) % 3600 / 60` is that minute's place in its hour. 3^30 < 2^53, so every code is
an integer exact in a float64 and in the engine's JSON (VictoriaMetrics 1.79 prints values
round-trip). The sm_active sum of the half is a sum of `clamp(avg_over_time(…), 0, 100)`.
So a unit-hour costs ~2 numbers per signal, not 60.

The half-hour codes are decoded with numpy into the 60-bit masks of prometheus_masks.py
(activity known / hot, sm_active known / hot, the sm_active sum), combined per unit by the
roles of masks.py (the first activity signal present wins; process presence stands in only
on instances that reported and have neither engine signal).

**Recorded.** The leader replica records each closed hour's masks back into the engine by
`/api/v1/import` (JSON lines; vminsert's `/insert/<tenant>/prometheus` accepts it too): per
unit one series, `gpufleet_masks`, labelled like the unit's series plus the thresholds the
masks were judged at (`activity_at`, `effective_at`), with five samples in the hour, 10
minutes apart (`SLOTS`): the unit's activity and sm_active masks as base-3 codes of
minutes 0–29 and 30–59, and the sm_active sum. Then one `gpufleet_masks_recorded` sample
at the hour's start whose value is the number of units recorded. A replica reads 25 hours
of them with one `/api/v1/export` (JSON lines, numeric values), and takes an hour only
where every slot holds as many units as the marker says (an import seen half searchable
is not taken). One series per unit, not one per number: the export's cost goes with the
series (5 series per unit cost the engine ~2.5× as much to export: BENCHMARKS.md).
Samples 10 minutes apart survive any `-dedup.minScrapeInterval` up to 10 minutes.

**Recorded halves.** Once the open hour's first half (minutes 0–29) is closed, the leader
records it too, apart: per unit one `gpufleet_masks_half` series with three samples 10
minutes apart from the hour's start (`HALF_SLOTS`: the activity and sm_active codes of
minutes 0–29 and their sm_active sum), then one `gpufleet_masks_half_recorded` marker at the
hour's start. A cold replica reads it with a second export of the open hour only, and
computes in the engine the open half alone (6 queries, not 12). The same rule as the hours':
a half whose slots do not all hold as many units as its one marker says, or whose markers
disagree, is computed instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from gpufleet.domain.telemetry.funnel import (
    GR_ENGINE_ACTIVE,
    MEMORY_USED,
    PROCESS_MEMORY,
    SM_ACTIVE,
    UTILIZATION,
    Thresholds,
)
from gpufleet.tsdb.masks import GR, PMEM, PROC, SM, UTIL, signal_role
from gpufleet.tsdb.prometheus_names import exposition_name
from gpufleet.tsdb.protocol import HOUR_MS, MINUTE_MS

HALF_MS = HOUR_MS // 2
HALF_MINUTES = 30
UNIT_AXES = ("gpu_uuid", "mig_uuid", "node", "environment", "model")
ROLES = 5  # GR, UTIL, SM, PMEM, PROC
_POWERS = 3 ** np.arange(HALF_MINUTES, dtype=np.int64)
_U64 = np.uint64

# The recorded series: one per unit, its samples in the hour at SLOT_MS × slot.
RECORDED_NAME = "gpufleet_masks"
SLOTS = ("activity_lo", "activity_hi", "sm_lo", "sm_hi", "sm_sum")  # `HourMasks.codes()`
SLOT_MS = 10 * MINUTE_MS
MARKER_NAME = "gpufleet_masks_recorded"
# The open hour's closed first half, recorded apart (its own series: the hour's slots stay
# as they are): its samples at SLOT_MS × slot from the hour's start.
HALF_NAME = "gpufleet_masks_half"
HALF_SLOTS = ("activity_lo", "sm_lo", "sm_sum_lo")  # `HourMasks.half_codes()`
HALF_MARKER_NAME = "gpufleet_masks_half_recorded"


@dataclass(frozen=True)
class Signal:
    """One part of the half-hour query: a metric, whether its minute is judged by its mean
    against a threshold (`hot_at`: which one) or by presence, and which series matter."""

    metric: str
    hot_at: str | None  # "activity" | "effective" | None (presence)
    matcher: str = ""  # extra selector matchers
    per_unit: bool = False  # several series per unit (processes): counted in the engine


SIGNALS = {"gr": Signal(GR_ENGINE_ACTIVE, "activity"),
           "util": Signal(UTILIZATION, "activity", 'mig_uuid=""'),  # whole GPUs only
           "sm": Signal(SM_ACTIVE, "effective"),
           "pmem": Signal(MEMORY_USED, None, 'mig_uuid!=""'),
           "proc": Signal(PROCESS_MEMORY, None, 'mig_uuid!=""', per_unit=True)}
SM_SUM_PART = "smsum"


def threshold_labels(thresholds: Thresholds) -> dict[str, str]:
    """The labels that keep masks judged at other thresholds apart."""
    return {"activity_at": repr(float(thresholds.activity_percent)),
            "effective_at": repr(float(thresholds.effective_sm_active_percent))}


def halves(lo_ms: int, hi_ms: int) -> Iterable[tuple[int, int]]:
    """[lo, hi) (whole minutes) cut at half-hour boundaries: one query each."""
    while lo_ms < hi_ms:
        end = min((lo_ms // HALF_MS + 1) * HALF_MS, hi_ms)
        yield lo_ms, end
        lo_ms = end


def half_queries(lo_ms: int, hi_ms: int, thresholds: Thresholds) -> dict[str, str]:
    """Per part, the instant query, evaluated at `hi_ms`, whose answer holds every series'
    code for the minutes [lo, hi) of one half hour (and, part SM_SUM_PART, sm_active's
    sum). One query per part: a union of them (`or` with `label_replace`) cost the engine
    twice the parts' sum (1.5 against ~0.8 CPU-s at 10,000 GPUs)."""
    base = (lo_ms % HOUR_MS) // MINUTE_MS // HALF_MINUTES * HALF_MINUTES
    weight = f"3^((((time() - 60) % 3600) / 60) - {base})"
    span = f"[{hi_ms - lo_ms}ms:1m]"
    at = {"activity": thresholds.activity_percent,
          "effective": thresholds.effective_sm_active_percent}
    parts = {}
    for part, signal in SIGNALS.items():
        selector = _selector(signal)
        if signal.hot_at is None:
            minute = f"count_over_time({selector}[60s] offset 1ms)"
            if signal.per_unit:
                minute = f"count by ({', '.join(UNIT_AXES)}) ({minute})"
            digit = f"({minute} > bool 0)"
        else:
            digit = (f"((avg_over_time({selector}[60s] offset 1ms) >= bool "
                     f"{float(at[signal.hot_at])!r}) + 1)")
        parts[part] = f"sum_over_time(({digit} * {weight}){span})"
    parts[SM_SUM_PART] = (f"sum_over_time(clamp(avg_over_time({_selector(SIGNALS['sm'])}"
                          f"[60s] offset 1ms), 0, 100){span})")
    return parts


def _selector(signal: Signal) -> str:
    matchers = [f'__name__="{exposition_name(signal.metric)}"', signal.matcher]
    return "{" + ", ".join(filter(None, matchers)) + "}"


# -- base-3 codes ---------------------------------------------------------------------------

_CHUNK_MINUTES = 10  # decoded 10 base-3 digits at a time, by table


def _chunk_tables() -> tuple[np.ndarray, np.ndarray]:
    """For every code of 10 minutes (0 … 3^10 − 1): its (known, hot) 10-bit masks."""
    codes = np.arange(3 ** _CHUNK_MINUTES, dtype=np.int64)
    known = np.zeros(len(codes), _U64)
    hot = np.zeros(len(codes), _U64)
    for minute in range(_CHUNK_MINUTES):
        digit = codes // 3 ** minute % 3
        known |= (digit > 0).astype(_U64) << _U64(minute)
        hot |= (digit == 2).astype(_U64) << _U64(minute)
    return known, hot


_KNOWN_OF_CHUNK, _HOT_OF_CHUNK = _chunk_tables()


def decode(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Base-3 codes of 30 minutes → (known, hot) 30-bit masks (uint64): three 10-minute
    chunks looked up in a table of 3^10 entries (not 30 passes of a digit each: the cold
    read decodes 4 codes per unit-hour, 10 million at 100,000 GPUs)."""
    rest = codes.astype(np.int64)
    known = np.zeros(len(rest), _U64)
    hot = np.zeros(len(rest), _U64)
    for chunk in range(HALF_MINUTES // _CHUNK_MINUTES):
        rest, digits = np.divmod(rest, 3 ** _CHUNK_MINUTES)
        shift = _U64(chunk * _CHUNK_MINUTES)
        known |= _KNOWN_OF_CHUNK[digits] << shift
        hot |= _HOT_OF_CHUNK[digits] << shift
    return known, hot


def encode(known: np.ndarray, hot: np.ndarray) -> np.ndarray:
    """(known, hot) 30-bit masks, hot within known → base-3 codes (int64)."""
    codes = np.zeros(len(known), np.int64)
    for minute in range(HALF_MINUTES):
        bit = _U64(1) << _U64(minute)
        digit = ((known & bit) != 0).astype(np.int64) + ((hot & bit) != 0)
        codes += digit * _POWERS[minute]
    return codes


_LOW30 = _U64((1 << HALF_MINUTES) - 1)


def split(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return mask & _LOW30, mask >> _U64(HALF_MINUTES)


# -- one hour's masks -----------------------------------------------------------------------

class HourMasks:
    """One hour's masks per unit id (numpy columns; ids beyond their length have none)."""

    __slots__ = ("act_hot", "act_known", "sm_hot", "sm_known", "sm_sum", "sm_sum_lo")

    def __init__(self, units: int) -> None:
        self.act_known = np.zeros(units, _U64)
        self.act_hot = np.zeros(units, _U64)
        self.sm_known = np.zeros(units, _U64)
        self.sm_hot = np.zeros(units, _U64)
        self.sm_sum = np.zeros(units, np.float64)
        # The part of sm_sum from minutes 0–29 (to record the first half apart); NaN where
        # not known (an hour read from its recording holds only the hour's sum).
        self.sm_sum_lo = np.zeros(units, np.float64)

    def __len__(self) -> int:
        return len(self.sm_sum)

    def grown(self, units: int) -> HourMasks:
        """Self, with columns at least `units` long."""
        if units > len(self):
            for name in self.__slots__:
                column = getattr(self, name)
                setattr(self, name, np.concatenate([column, np.zeros(units - len(column),
                                                                     column.dtype)]))
        return self

    def merge(self, other: HourMasks) -> None:
        """Add the fold of other minutes of the same hour."""
        self.grown(len(other))
        n = len(other)
        for name in ("act_known", "act_hot", "sm_known", "sm_hot"):
            getattr(self, name)[:n] |= getattr(other, name)
        self.sm_sum[:n] += other.sm_sum
        self.sm_sum_lo[:n] += other.sm_sum_lo

    def units(self) -> np.ndarray:
        """The ids of the units with any minute known."""
        return np.flatnonzero(self.act_known | self.sm_known)

    def codes(self, uids: np.ndarray) -> list[np.ndarray]:
        """The recorded columns of `uids` (in SLOTS' order)."""
        act_lo, act_hi = split(self.act_known[uids])
        hot_lo, hot_hi = split(self.act_hot[uids])
        sm_lo, sm_hi = split(self.sm_known[uids])
        smh_lo, smh_hi = split(self.sm_hot[uids])
        return [encode(act_lo, hot_lo), encode(act_hi, hot_hi), encode(sm_lo, smh_lo),
                encode(sm_hi, smh_hi), self.sm_sum[uids]]

    def half_units(self) -> np.ndarray:
        """The ids of the units with any minute of 0–29 known."""
        return np.flatnonzero((self.act_known | self.sm_known) & _LOW30)

    def half_codes(self, uids: np.ndarray) -> list[np.ndarray]:
        """The recorded columns of minutes 0–29 of `uids` (in HALF_SLOTS' order)."""
        return [encode(self.act_known[uids] & _LOW30, self.act_hot[uids] & _LOW30),
                encode(self.sm_known[uids] & _LOW30, self.sm_hot[uids] & _LOW30),
                self.sm_sum_lo[uids]]

    def set_half_codes(self, uids: np.ndarray, columns: Sequence[np.ndarray]) -> None:
        """Store recorded columns of minutes 0–29 of `uids` (the inverse of `half_codes`)."""
        self.grown(int(uids.max()) + 1 if len(uids) else 0)
        act, sm, sm_sum = columns
        self.act_known[uids], self.act_hot[uids] = decode(act)
        self.sm_known[uids], self.sm_hot[uids] = decode(sm)
        self.sm_sum[uids] = sm_sum
        self.sm_sum_lo[uids] = sm_sum

    def set_codes(self, uids: np.ndarray, columns: Sequence[np.ndarray]) -> None:
        """Store recorded columns of `uids` (the inverse of `codes`)."""
        self.grown(int(uids.max()) + 1 if len(uids) else 0)
        act_lo, act_hi, sm_lo, sm_hi, sm_sum = columns
        for (lo, hi), known, hot in (((act_lo, act_hi), self.act_known, self.act_hot),
                                     ((sm_lo, sm_hi), self.sm_known, self.sm_hot)):
            k_lo, h_lo = decode(lo)
            k_hi, h_hi = decode(hi)
            known[uids] = k_lo | (k_hi << _U64(HALF_MINUTES))
            hot[uids] = h_lo | (h_hi << _U64(HALF_MINUTES))
        self.sm_sum[uids] = sm_sum
        self.sm_sum_lo[uids] = np.nan


def fold_answer(answers: Mapping[str, Sequence[Mapping]], lo_ms: int,
                unit_id: Callable[[Mapping, int], int], units: Callable[[], int],
                settled: Mapping[tuple[str, str | None], int] | None = None) -> HourMasks:
    """The masks of one half hour's answers (part → result entries of `half_queries` for
    minutes from `lo_ms`). `unit_id(labels, at_ms)` names a series' unit; `units()` how
    many are known after; `settled` (optional) the ids of units (gpu_uuid, mig_uuid) for
    which `unit_id(labels, lo_ms)` would change nothing (looked up without the call: a
    refresh folds 300,000 series at 100,000 GPUs).

    Where one unit has two label sets (it moved node or environment), a signal is known or
    hot in a minute if either says so; the sm_active sum is the mean of their sums per
    minute (each series' sum scaled by the minutes of the union over the minutes it has)."""
    shift = _U64((lo_ms % HOUR_MS) // MINUTE_MS // HALF_MINUTES * HALF_MINUTES)
    roles_cache: dict[tuple[str, bool, str], int | None] = {}
    code_uid, code_role, code_value = [], [], []
    sum_uid, sum_value = [], []
    for part, results in answers.items():
        signal = SIGNALS["sm"] if part == SM_SUM_PART else SIGNALS[part]
        for found in results:
            labels = found["metric"]
            gpu = labels.get("gpu_uuid")
            if gpu is None:
                continue
            mig = labels.get("mig_uuid") or None
            key = (signal.metric, mig is None, labels.get("model", ""))
            role = roles_cache.get(key, -1)
            if role == -1:
                role = roles_cache[key] = signal_role(signal.metric, mig, key[2])
            if role is None:
                continue
            uid = settled.get((gpu, mig)) if settled is not None else None
            if uid is None:
                uid = unit_id(labels, lo_ms)
            if part == SM_SUM_PART:
                sum_uid.append(uid)
                sum_value.append(float(found["value"][1]))
            else:
                code_uid.append(uid)
                code_role.append(role)
                code_value.append(float(found["value"][1]))
    n = units()
    hour = HourMasks(n)
    uids = np.array(code_uid, np.int64)
    roles = np.array(code_role, np.int64)
    known, hot = decode(np.array(code_value, np.float64))
    known, hot = known << shift, hot << shift
    by_role_known = np.zeros(ROLES * n, _U64)
    by_role_hot = np.zeros(ROLES * n, _U64)
    flat = roles * n + uids
    np.bitwise_or.at(by_role_known, flat, known)
    np.bitwise_or.at(by_role_hot, flat, hot)
    k = by_role_known.reshape(ROLES, n)
    h = by_role_hot.reshape(ROLES, n)
    gr, util, sm, pmem, proc = k[GR], k[UTIL], k[SM], k[PMEM], k[PROC]
    hour.act_known = gr | util | pmem
    # A minute's activity is its first signal present (`unit_activity`).
    hour.act_hot = h[GR] | (h[UTIL] & ~gr) | (pmem & proc & ~gr & ~util)
    hour.sm_known = sm
    hour.sm_hot = h[SM]
    if sum_uid:
        sums = np.array(sum_value, np.float64)
        s_uids = np.array(sum_uid, np.int64)
        np.add.at(hour.sm_sum, s_uids, sums)
        # Units answered by two sm_active series: scale to the union's minutes.
        per_series = np.zeros(n, np.int64)
        sm_rows = roles == SM
        np.add.at(per_series, uids[sm_rows], np.bitwise_count(known[sm_rows]))
        union = np.bitwise_count(sm).astype(np.int64)
        doubled = per_series > union
        hour.sm_sum[doubled] *= union[doubled] / per_series[doubled]
    if shift == 0:  # minutes of the first half
        hour.sm_sum_lo = hour.sm_sum.copy()
    return hour


# -- recording and reading back -------------------------------------------------------------

def recorded_lines(hour_ms: int, hour: HourMasks, labels_of: Sequence[Mapping[str, str]],
                   thresholds: Thresholds, *, half: bool = False) -> tuple[bytes, int]:
    """The JSON lines that record `hour` (for `/api/v1/import`), and the units recorded.
    `labels_of[uid]` is each unit's label set (gpu_uuid, mig_uuid, node, …). `half`: its
    minutes 0–29 only, as HALF_NAME (the sm_active sum of those minutes must be known)."""
    uids = hour.half_units() if half else hour.units()
    name, slots = (HALF_NAME, HALF_SLOTS) if half else (RECORDED_NAME, SLOTS)
    extra = threshold_labels(thresholds)
    columns = hour.half_codes(uids) if half else hour.codes(uids)
    if half and np.isnan(columns[-1]).any():
        raise ValueError("the first half's sm_active sum is not known")
    rows = np.column_stack([c.astype(np.float64) for c in columns]).tolist()
    stamp = b',"timestamps":' + orjson.dumps(
        [hour_ms + slot * SLOT_MS for slot in range(len(slots))]) + b"}"
    lines = [b'{"metric":' + orjson.dumps({"__name__": name, **labels_of[uid], **extra})
             + b',"values":' + orjson.dumps(row) + stamp
             for uid, row in zip(uids.tolist(), rows, strict=True)]
    return b"\n".join(lines) + b"\n", len(uids)


def marker_line(hour_ms: int, units: int, thresholds: Thresholds,
                name: str = MARKER_NAME) -> bytes:
    metric = {"__name__": name, **threshold_labels(thresholds)}
    return orjson.dumps({"metric": metric, "values": [units], "timestamps": [hour_ms]}) + b"\n"


def export_selector(thresholds: Thresholds, name: str = f"{RECORDED_NAME}|{MARKER_NAME}"
                    ) -> str:
    matchers = ", ".join(f'{k}="{v}"' for k, v in threshold_labels(thresholds).items())
    return f'{{__name__=~"{name}", {matchers}}}'


HALF_SELECTOR_NAME = f"{HALF_NAME}|{HALF_MARKER_NAME}"


def read_export(lines: Iterable[bytes], unit_id: Callable[[Mapping, int], int],
                units: Callable[[], int], *, half: bool = False) -> dict[int, HourMasks]:
    """The hours recorded in an export's JSON lines whose units match their marker.
    `half`: the first halves recorded (HALF_NAME), as hours with minutes 0–29 only."""
    name, marker, slots = (HALF_NAME, HALF_MARKER_NAME, HALF_SLOTS) if half else \
        (RECORDED_NAME, MARKER_NAME, SLOTS)
    # Lines by the text of their times: most units share it (every hour recorded), so the
    # times are parsed once per text and the values scattered a group at a time.
    groups: dict[bytes, tuple[list[int], list[bytes]]] = {}
    markers: dict[int, int] = {}
    for line in lines:
        if not line:
            continue
        recorded = _recorded_line(line)
        if recorded is None:
            found = orjson.loads(line)
            labels = found["metric"]
            values_text = orjson.dumps(found.get("values", []))[1:-1]
            stamps_text = orjson.dumps(found.get("timestamps", []))[1:-1]
        else:
            labels, values_text, stamps_text = recorded
        series_name = labels.get("__name__")
        if series_name == marker:
            found = orjson.loads(line)
            for at_ms, value in zip(found["timestamps"], found["values"], strict=True):
                # Two leaders' markers of one hour that disagree (the engine may keep both
                # until it deduplicates): the hour is vouched for by neither.
                held = markers.setdefault(at_ms, int(value))
                if held != int(value):
                    markers[at_ms] = -1
            continue
        if series_name != name or "gpu_uuid" not in labels or not stamps_text:
            continue
        if values_text.count(b",") != stamps_text.count(b","):
            raise ValueError(f"an export line with other counts of values and times: {line!r}")
        first_ms = int(stamps_text[:stamps_text.find(b",")] if b"," in stamps_text
                       else stamps_text)
        group = groups.setdefault(stamps_text, ([], []))
        group[0].append(unit_id(labels, first_ms))
        group[1].append(values_text)
    n = units()
    hours: dict[int, HourMasks] = {}
    for hour_ms, expected in markers.items():  # hours recorded with no unit at all
        if expected == 0:
            hours[hour_ms] = HourMasks(n)
    if not groups:
        return hours
    # Scattered straight into a grid (hour, slot, unit): no sort of the 12 million values
    # a 100,000-GPU day holds.
    stamps = {text: _numbers(text).astype(np.int64) for text in groups}
    first_hour = min(int(at.min()) for at in stamps.values()) // HOUR_MS * HOUR_MS
    span = (max(int(at.max()) for at in stamps.values()) - first_hour) // HOUR_MS + 1
    grid = np.zeros((span, len(slots), n), np.float64)
    present = np.zeros((span, len(slots), n), np.bool_)
    for text, (line_uids, value_texts) in groups.items():
        at = stamps[text]
        values = _numbers(b",".join(value_texts)).reshape(len(line_uids), len(at))
        hour_index = (at - first_hour) // HOUR_MS
        slot = (at - first_hour - hour_index * HOUR_MS) // SLOT_MS
        keep = slot < len(slots)
        cells = (hour_index[keep][:, None], slot[keep][:, None],
                 np.array(line_uids, np.int64)[None, :])
        grid[cells] = values[:, keep].T
        present[cells] = True
    found = present.sum(axis=2)  # units per (hour, slot)
    for h in range(span):
        hour_ms = first_hour + h * HOUR_MS
        expected = markers.get(hour_ms)
        if expected is None or (found[h] != expected).any():
            continue  # not (yet) all searchable: computed instead
        hour_uids = np.flatnonzero(present[h, 0])
        hour = HourMasks(n)
        columns = [grid[h, s_, hour_uids] for s_ in range(len(slots))]
        if half:
            hour.set_half_codes(hour_uids, columns)
        else:
            hour.set_codes(hour_uids, columns)
        hours[hour_ms] = hour
    return hours


_VALUES_AT = b',"values":['
_STAMPS_AT = b'],"timestamps":['


def _recorded_line(line: bytes) -> tuple[dict, bytes, bytes] | None:
    """An export line's labels and the text of its values and of its times (numbers
    between commas), its numbers left unparsed; None where the line is not laid out as
    VictoriaMetrics writes it (`{"metric":{…},"values":[…],"timestamps":[…]}`). The
    labels' JSON strings cannot hold `,"values":[` (their quotes are escaped)."""
    if not line.startswith(b'{"metric":') or not line.endswith(b"]}"):
        return None
    values_at = line.find(_VALUES_AT)
    stamps_at = line.find(_STAMPS_AT, values_at)
    if values_at < 0 or stamps_at < 0:
        return None
    labels = orjson.loads(line[10:values_at])
    return labels, line[values_at + len(_VALUES_AT):stamps_at], \
        line[stamps_at + len(_STAMPS_AT):-2]


def _numbers(text: bytes) -> np.ndarray:
    """Comma-separated JSON numbers → float64, parsed in C (no Python float each: the cold
    read holds 12 million values at 100,000 GPUs). Raises where a number does not parse."""
    if not text:
        return np.zeros(0, np.float64)
    numbers = np.fromstring(text, np.float64, sep=",")
    if len(numbers) != text.count(b",") + 1:
        raise ValueError("an export's numbers did not parse")
    return numbers

