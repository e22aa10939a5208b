"""Health rules: each a small class that looks at one GPU's signals and answers a finding
(`suspect` or `quarantine`, with evidence) or None.

The default pack follows NVIDIA's documented signals; the source of each fact is in
docs/operations.md, "GPU health and quarantine". Thresholds and verdicts come from the
settings (`HealthThresholds`), so an operator can tighten or relax them.

Signals are what the evaluator read for one GPU over the evaluation window: counter
*increases* (never absolute totals: aggregate ECC counts persist across reboots, so a GPU
carrying an old total is not failing now), the latest value of state flags, the share
of samples with a throttle reason set, and the inventory's word on missing GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from gpufleet.domain.errors import InvalidInput
from gpufleet.domain.operations.health import Evidence, Finding, Verdict

# What the NVIDIA XID catalogue says of the codes the default pack names
# (docs.nvidia.com/deploy/xid-errors; docs/operations.md has the table).
XID_MEANINGS = {
    13: "graphics engine exception (application)",
    31: "GPU memory page fault (application)",
    43: "GPU stopped processing (application)",
    45: "preemptive cleanup after earlier errors (application)",
    48: "double-bit ECC error",
    63: "row remapping recorded: reset the GPU to apply it",
    64: "row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}
# XIDs an application causes (a bad kernel, a page fault, a killed context): the GPU is
# fine, the program is not. They never move a GPU, whatever the settings say.
APPLICATION_XIDS = frozenset({13, 31, 43, 45})

# gpu.clock_throttle_reasons bits (catalogue_rows_health.CLOCK_THROTTLE_REASON_BITS)
THERMAL_SLOWDOWN_BITS = 0x008 | 0x020 | 0x040  # HW slowdown, SW / HW thermal slowdown
POWER_SLOWDOWN_BITS = 0x004 | 0x080  # SW power cap, HW power brake


@dataclass(frozen=True)
class Reading:
    """A value the evaluator read and the time of its latest sample."""

    value: float
    at: datetime


@dataclass(frozen=True)
class GpuSignals:
    """What one evaluation read for one GPU over the last `window`.

    Increases count what happened inside the window (a counter reset counts from 0; a
    series first seen inside the window counts its value). `*_share`: the share of the
    window's samples with those throttle reasons set, and how long the samples span."""

    uuid: str
    window: timedelta
    xid_increases: Mapping[int, Reading] = field(default_factory=dict)
    ecc_uncorrected_increase: Reading | None = None
    remap_pending: Reading | None = None
    remap_failed: Reading | None = None
    nvlink_errors_increase: Reading | None = None
    thermal_share: Reading | None = None
    power_share: Reading | None = None
    throttle_span: timedelta = timedelta(0)
    missing_since: datetime | None = None
    # Uncorrectable errors a MIG instance contained over the window: contained XIDs
    # (XID 94) its instances' events named (mig_health.py). They count in the GPU's ECC
    # total too, but took only their instance's work down.
    contained_on_instances: float = 0


class HealthRule(Protocol):
    name: str

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None: ...


def minutes(window: timedelta) -> str:
    return f"{window.total_seconds() / 60:g} min"


@dataclass(frozen=True)
class XidRule:
    """A new XID of a code the pack names: `quarantine` codes take the GPU out of service,
    `suspect` codes mark it. Application XIDs never count."""

    quarantine: frozenset[int]
    suspect: frozenset[int]
    name: str = "xid"

    def __post_init__(self) -> None:
        wrong = sorted((self.quarantine | self.suspect) & APPLICATION_XIDS)
        if wrong:
            raise InvalidInput(f"XID {', '.join(map(str, wrong))} is an application error "
                               "and never marks a GPU", code="invalid_health_rule",
                               details={"xids": wrong})

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        return xid_finding(self.name, self.quarantine, self.suspect, s.xid_increases,
                           s.window)


def xid_finding(rule: str, quarantine: frozenset[int], suspect: frozenset[int],
                increases: Mapping[int, Reading], window: timedelta, where: str = ""
                ) -> Finding | None:
    """The strongest verdict the XID codes that rose call for (a quarantine code first,
    else the first suspect one), with the code's meaning as evidence; application XIDs
    never count. `where`: " on MIG instance …" for an instance's XIDs."""
    found: Finding | None = None
    for code, reading in sorted(increases.items()):
        if reading.value <= 0 or code in APPLICATION_XIDS:
            continue
        if code in quarantine:
            verdict = Verdict.QUARANTINE
        elif code in suspect:
            verdict = Verdict.SUSPECT
        else:
            continue
        meaning = XID_MEANINGS.get(code, "see the XID catalogue")
        finding = Finding(rule, verdict, Evidence(
            "gpu.xid_errors_total", reading.value, reading.at,
            f"XID {code} ({meaning}){where}: +{reading.value:g} in {minutes(window)}"))
        if verdict is Verdict.QUARANTINE:
            return finding
        found = found or finding
    return found


@dataclass(frozen=True)
class EccUncorrectedRule:
    """Uncorrectable (double-bit) ECC errors rose by at least `min_increase`.

    On a MIG GPU, errors that its instances contained (as many contained XIDs named an
    instance as the counter rose) took only those instances out (mig_health.py): the GPU
    is `suspect` (it wants a reset to apply the row remapping), not quarantined with every
    other instance on it. An increase beyond what was contained is the GPU's."""

    min_increase: float = 1
    action: Verdict = Verdict.QUARANTINE
    name: str = "ecc_uncorrected"

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        r = s.ecc_uncorrected_increase
        if r is None or r.value < self.min_increase:
            return None
        line = f"uncorrectable ECC errors +{r.value:g} in {minutes(s.window)}"
        if s.contained_on_instances and r.value <= s.contained_on_instances:
            return Finding(self.name, Verdict.SUSPECT, Evidence(
                "gpu.ecc_uncorrected_errors_total", r.value, r.at,
                f"{line}, contained by MIG instances (XID 94): reset the GPU when "
                "convenient"))
        return Finding(self.name, self.action, Evidence(
            "gpu.ecc_uncorrected_errors_total", r.value, r.at, line))


@dataclass(frozen=True)
class RowRemapFailureRule:
    """A row remapping failed: the GPU needs service."""

    action: Verdict = Verdict.QUARANTINE
    name: str = "row_remap_failure"

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        r = s.remap_failed
        if r is None or r.value < 1:
            return None
        return Finding(self.name, self.action, Evidence(
            "gpu.remapped_rows_failed", r.value, r.at, "a row remapping failed"))


@dataclass(frozen=True)
class RowRemapPendingRule:
    """A row remapping waits for a GPU reset: running work is safe, the GPU wants a reset."""

    action: Verdict = Verdict.SUSPECT
    name: str = "row_remap_pending"

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        r = s.remap_pending
        if r is None or r.value < 1:
            return None
        return Finding(self.name, self.action, Evidence(
            "gpu.remapped_rows_pending", r.value, r.at,
            "a row remapping is pending: reset the GPU to apply it"))


@dataclass(frozen=True)
class NvlinkErrorRateRule:
    """NVLink CRC (flit and data) and replay errors per second over the window, all links
    together: a rate, because a long-lived link gathers a few errors over months."""

    suspect_per_s: float
    quarantine_per_s: float | None = None
    name: str = "nvlink_errors"

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        r = s.nvlink_errors_increase
        seconds = s.window.total_seconds()
        if r is None or seconds <= 0:
            return None
        rate = r.value / seconds
        if self.quarantine_per_s is not None and rate >= self.quarantine_per_s:
            verdict = Verdict.QUARANTINE
        elif rate >= self.suspect_per_s:
            verdict = Verdict.SUSPECT
        else:
            return None
        return Finding(self.name, verdict, Evidence(
            "gpu.nvlink_errors_per_s", round(rate, 6), r.at,
            f"NVLink CRC and replay errors at {rate:.3g}/s over {minutes(s.window)}"))


@dataclass(frozen=True)
class SlowdownRule:
    """Throttled for thermal or power reasons for at least `min_share` of the samples of a
    window at least `min_span` long: sustained, not one hot minute."""

    name: str
    what: str
    signal: str  # "thermal_share" | "power_share"
    min_share: float
    min_span: timedelta
    action: Verdict = Verdict.SUSPECT

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        r: Reading | None = getattr(s, self.signal)
        if r is None or s.throttle_span < self.min_span or r.value < self.min_share:
            return None
        return Finding(self.name, self.action, Evidence(
            "gpu.clock_throttle_reasons", round(r.value, 3), r.at,
            f"{self.what} slowdown in {r.value:.0%} of samples over "
            f"{minutes(s.throttle_span)}"))


@dataclass(frozen=True)
class MissingFromInventoryRule:
    """The GPU's node no longer lists it: suspect at once (registration marks it), and
    `quarantine` once it has been missing for `quarantine_after`."""

    quarantine_after: timedelta | None
    name: str = "missing_from_inventory"

    def verdict(self, s: GpuSignals, now: datetime) -> Finding | None:
        if s.missing_since is None:
            return None
        gone = now - s.missing_since
        verdict = Verdict.QUARANTINE if self.quarantine_after is not None and \
            gone >= self.quarantine_after else Verdict.SUSPECT
        return Finding(self.name, verdict, Evidence(
            "inventory", None, s.missing_since,
            f"missing from its node's inventory since "
            f"{s.missing_since.isoformat(timespec='seconds')}"))


@dataclass(frozen=True)
class HealthThresholds:
    """The pack's knobs, as the settings give them (docs/operations.md)."""

    xid_quarantine: frozenset[int] = frozenset({48, 64, 74, 79, 95, 119, 120})
    xid_suspect: frozenset[int] = frozenset({63, 94})
    ecc_uncorrected_min_increase: float = 1
    nvlink_suspect_per_s: float = 0.01
    nvlink_quarantine_per_s: float | None = None
    slowdown_min_share: float = 0.9
    slowdown_min_span: timedelta = timedelta(minutes=10)
    missing_quarantine_after: timedelta | None = timedelta(minutes=30)
    mig_xid_quarantine: frozenset[int] = frozenset({94})
    mig_xid_suspect: frozenset[int] = frozenset()


def default_pack(t: HealthThresholds = HealthThresholds()) -> tuple[HealthRule, ...]:
    """The rules in the order they are asked: quarantine-class signals first."""
    return (
        XidRule(t.xid_quarantine, t.xid_suspect),
        EccUncorrectedRule(t.ecc_uncorrected_min_increase),
        RowRemapFailureRule(),
        NvlinkErrorRateRule(t.nvlink_suspect_per_s, t.nvlink_quarantine_per_s),
        MissingFromInventoryRule(t.missing_quarantine_after),
        RowRemapPendingRule(),
        SlowdownRule("thermal_slowdown", "thermal", "thermal_share", t.slowdown_min_share,
                     t.slowdown_min_span),
        SlowdownRule("power_slowdown", "power", "power_share", t.slowdown_min_share,
                     t.slowdown_min_span),
    )


def findings(pack: tuple[HealthRule, ...], s: GpuSignals, now: datetime) -> list[Finding]:
    return [f for rule in pack if (f := rule.verdict(s, now)) is not None]
