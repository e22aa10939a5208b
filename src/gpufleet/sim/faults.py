"""Failing GPUs: which simulated GPUs go bad, how, and what their counters say over time.

A seeded few GPUs (`DEFAULT_FAULT_RATE`) get one fault each; tests and demos can name the
faults of a GPU instead. A fault is a schedule of events from the time the backend started
(`elapsed_s`), in closed form, so its counters are monotonic lifetime counters, the same
for the same (seed, elapsed time), and cost nothing to evaluate. Signals go together as
they do on real hardware (XID meanings: NVIDIA's XID catalogue):

- `ecc_uncorrected`: corrected ECC errors keep rising; now and then an uncorrected one,
  which is XID 48 (double-bit error) before Ampere, and from Ampere on XID 94 (contained)
  plus XID 63 (a row remapping recorded): a row is remapped and waits for a reset.
- `row_remap_failure`: an uncorrectable error the remapper could not fix: XID 95
  (uncontained) and XID 64, `remapped_rows_failed` set (pre-Ampere: XID 48).
- `nvlink`: CRC, replay and recovery errors rise; each recovery raises XID 74.
- `fallen_off_bus`: PCIe replays rise, then XID 79: the GPU is lost and reads nothing more.
- `thermal`: poor cooling, the GPU runs hot and throttles (flags and clocks: telemetry.py).
- `power`: a lowered power cap; under load the GPU sits at the cap and throttles.

Healthy GPUs are not spotless either: aggregate ECC and PCIe replay counters persist across
reboots, so a few carry small constant totals.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from .ids import stable_key
from .workloads import between, uniform

DEFAULT_FAULT_RATE = 0.02
XID_CODES = (48, 63, 64, 74, 79, 94, 95)
_HOUR_S = 3600.0


class FaultKind(StrEnum):
    ECC_UNCORRECTED = "ecc_uncorrected"
    ROW_REMAP_FAILURE = "row_remap_failure"
    NVLINK = "nvlink"
    FALLEN_OFF_BUS = "fallen_off_bus"
    THERMAL = "thermal"
    POWER = "power"


@dataclass(frozen=True, slots=True)
class _Events:
    """Events at first_s, first_s + every_s, ... (seconds after the backend started)."""

    first_s: float
    every_s: float = math.inf

    def count(self, elapsed_s: float) -> int:
        if elapsed_s < self.first_s:
            return 0
        if math.isinf(self.every_s):
            return 1
        return 1 + int((elapsed_s - self.first_s) // self.every_s)

    def last_s(self, elapsed_s: float) -> float | None:
        n = self.count(elapsed_s)
        if n == 0:
            return None
        return self.first_s if n == 1 else self.first_s + (n - 1) * self.every_s


@dataclass(frozen=True, slots=True)
class FaultState:
    """A GPU's health counters and conditions at one instant (catalogue units: counts, and
    XID codes). `xid_counts` holds only the codes seen; `xid_last_code` is 0 until one is."""

    xid_counts: tuple[tuple[int, int], ...] = ()
    xid_last_code: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    pcie_replays: int = 0
    nvlink_crc_flit: int = 0
    nvlink_crc_data: int = 0
    nvlink_replay: int = 0
    nvlink_recovery: int = 0
    lost: bool = False
    temperature_offset_c: float = 0.0
    power_limit_share: float = 1.0


@dataclass(frozen=True)
class GpuFaults:
    """What is wrong with one GPU (possibly nothing) and its baseline counters."""

    kinds: frozenset[FaultKind]
    key: int
    # When set, each fault's first event (XID) happens this many seconds after the backend
    # started instead of at its seeded time, hours in: a demo's schedule (`NodeTelemetry.
    # strike`), so a fault shows within minutes.
    onset_s: float | None = None

    @property
    def healthy(self) -> bool:
        return not self.kinds

    def _first(self, salt: int, lo: float, hi: float) -> float:
        return self.onset_s if self.onset_s is not None else between(self.key, salt, lo, hi)

    def state(self, elapsed_s: float, *, ampere_or_newer: bool) -> FaultState:
        """The counters and conditions `elapsed_s` after the backend started."""
        k = self.key
        corrected_base = int(between(k, 1, 1, 60)) if uniform(k, 2) < 0.1 else 0
        replay_base = int(between(k, 3, 1, 6)) if uniform(k, 4) < 0.2 else 0
        xids: list[tuple[int, _Events]] = []
        fields: dict[str, object] = {"ecc_corrected": corrected_base,
                                     "pcie_replays": replay_base}
        if FaultKind.ECC_UNCORRECTED in self.kinds:
            self._ecc(elapsed_s, fields, xids, ampere_or_newer)
        if FaultKind.ROW_REMAP_FAILURE in self.kinds:
            self._remap_failure(elapsed_s, fields, xids, ampere_or_newer)
        if FaultKind.NVLINK in self.kinds:
            self._nvlink(elapsed_s, fields, xids)
        if FaultKind.FALLEN_OFF_BUS in self.kinds:
            fields["pcie_replays"] = replay_base + int(between(k, 40, 100, 1000)
                                                       * elapsed_s / _HOUR_S)
            off_bus = _Events(self._first(41, 1.0 * _HOUR_S, 6.0 * _HOUR_S))
            xids.append((79, off_bus))
            fields["lost"] = off_bus.count(elapsed_s) > 0
        if FaultKind.THERMAL in self.kinds:
            fields["temperature_offset_c"] = between(k, 50, 18.0, 26.0)
        if FaultKind.POWER in self.kinds:
            fields["power_limit_share"] = between(k, 60, 0.55, 0.7)
        counts = tuple((code, n) for code, events in sorted(xids)
                       if (n := events.count(elapsed_s)) > 0)
        return FaultState(xid_counts=_merge(counts), xid_last_code=_last_code(xids, elapsed_s),
                          **fields)

    def _ecc(self, elapsed_s: float, fields: dict, xids: list, ampere: bool) -> None:
        k = self.key
        fields["ecc_corrected"] += int(between(k, 10, 20, 200) * elapsed_s / _HOUR_S)
        uncorrected = _Events(self._first(11, 300, 1800), between(k, 12, 1.0, 3.0) * _HOUR_S)
        n = uncorrected.count(elapsed_s)
        fields["ecc_uncorrected"] = n
        if ampere:
            xids += [(94, uncorrected), (63, _later(uncorrected, 1.0))]
            correctable = _Events(between(k, 13, 2.0, 4.0) * _HOUR_S, 6.0 * _HOUR_S)
            fields["remapped_correctable"] = correctable.count(elapsed_s)
            fields["remapped_uncorrectable"] = n
            fields["remap_pending"] = n > 0
        else:
            xids.append((48, uncorrected))

    def _remap_failure(self, elapsed_s: float, fields: dict, xids: list, ampere: bool) -> None:
        k = self.key
        failure = _Events(self._first(20, 600, 2400), between(k, 21, 2.0, 4.0) * _HOUR_S)
        n = failure.count(elapsed_s)
        fields["ecc_uncorrected"] = fields.get("ecc_uncorrected", 0) + n
        if ampere:
            xids += [(95, failure), (64, _later(failure, 1.0))]
            fields["remapped_uncorrectable"] = fields.get("remapped_uncorrectable", 0) + n
            fields["remap_failed"] = n > 0
        else:
            xids.append((48, failure))

    def _nvlink(self, elapsed_s: float, fields: dict, xids: list) -> None:
        k = self.key
        hours = elapsed_s / _HOUR_S
        fields["nvlink_crc_flit"] = int(between(k, 30, 50, 500) * hours)
        fields["nvlink_crc_data"] = int(between(k, 31, 5, 50) * hours)
        fields["nvlink_replay"] = int(between(k, 32, 10, 120) * hours)
        recovery = _Events(self._first(33, 120, 1200), between(k, 34, 0.5, 2.0) * _HOUR_S)
        fields["nvlink_recovery"] = recovery.count(elapsed_s)
        xids.append((74, recovery))


def _later(events: _Events, by_s: float) -> _Events:
    return _Events(events.first_s + by_s, events.every_s)


def _merge(counts: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
    merged: dict[int, int] = {}
    for code, n in counts:
        merged[code] = merged.get(code, 0) + n
    return tuple(sorted(merged.items()))


def _last_code(xids: list[tuple[int, _Events]], elapsed_s: float) -> int:
    latest = (-1.0, 0)
    for code, events in xids:
        at = events.last_s(elapsed_s)
        if at is not None and (at, code) > latest:
            latest = (at, code)
    return latest[1]


def faults_for(seed: int, gpu_uuid: str, *, rate: float = DEFAULT_FAULT_RATE,
               has_nvlink: bool = True, kinds: Iterable[FaultKind] | None = None,
               onset_s: float | None = None) -> GpuFaults:
    """The faults of one GPU: `kinds` when given (first events at `onset_s`, if given),
    else one seeded fault for `rate` of GPUs (NVLink faults only where the GPU has NVLink)."""
    key = stable_key(seed, "faults", gpu_uuid.lower())
    if kinds is not None:
        return GpuFaults(frozenset(FaultKind(kind) for kind in kinds), key, onset_s)
    if uniform(key, 0) >= rate:
        return GpuFaults(frozenset(), key)
    choices = [kind for kind in FaultKind if has_nvlink or kind is not FaultKind.NVLINK]
    return GpuFaults(frozenset({choices[int(uniform(key, 1) * len(choices))]}), key)
