"""The GPU page: the GPU's identity and health, its telemetry charted over a range, and its
allocation history — each section from the service call its API endpoint makes, with the
caller's principal (docs/dashboard.md, "GPU")."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from gpufleet.api.web.charts import Series
from gpufleet.api.web.page import (
    UI,
    Section,
    Viewer,
    api_url,
    page_status,
    render,
    section,
    services,
    ui_url,
    viewer,
)
from gpufleet.api.web.pages.gpu_charts import (
    GROUPS,
    MIG_ACTIVITY,
    PRESETS,
    Group,
    MetricSeries,
    Window,
    query_metric,
    window_of,
    with_gaps,
)
from gpufleet.domain.errors import GpufleetError
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.wire.inventory import GpuView

BINDINGS_SHOWN = 50
# The charts' range queries run side by side: each is one short store read, and the
# store answers reads in parallel (a DuckDB cursor each, without the GIL).
QUERY_THREADS = 4


@dataclass
class Chart:
    """One chart's series in its unit, each series' latest value, and the API calls."""

    group: Group
    series: list[Series]
    latest: list[tuple[str, float | None]]
    apis: list[str]

    @property
    def empty(self) -> bool:
        return all(value is None for _, value in self.latest)


def _chart(group: Group, answers: dict[str, MetricSeries], step_s: int) -> Chart:
    series, latest = [], []
    for line in group.lines:
        points = answers[line.metric].gpu
        series.append(Series(line.label, with_gaps(points, step_s, group.scale)))
        latest.append((line.label, points[-1][1] / group.scale if points else None))
    return Chart(group, series, latest, [answers[line.metric].api for line in group.lines])


def _mig_chart(gpu: GpuView, answer: MetricSeries, step_s: int) -> Chart | None:
    """Activity per MIG instance, labelled by profile, where the store has any."""
    if not answer.instances:
        return None
    names = {m.mig_uuid: f"{m.profile_name} @ {m.placement_start}" for m in gpu.mig_instances
             if m.mig_uuid}
    for mig in answer.instances:  # one destroyed since (an earlier layout)
        names.setdefault(mig, f"earlier instance {mig[:12]}…")
    group = Group("mig_activity", "Activity per MIG instance", "%", (), y_max=100)
    series = [Series(names[mig], with_gaps(points, step_s))
              for mig, points in sorted(answer.instances.items(),
                                        key=lambda item: names[item[0]])]
    latest = [(s.label, s.points[-1][1] if s.points else None) for s in series]
    return Chart(group, series, latest, [answer.api])


def charts(gf: Gpufleet, p: Principal, gpu: GpuView, window: Window) -> list[Chart]:
    """Every chart: one range query per metric, each a few hundred points at most."""
    metrics = sorted({line.metric for group in GROUPS for line in group.lines})
    with ThreadPoolExecutor(QUERY_THREADS, thread_name_prefix="gpu-page") as pool:
        answers = dict(zip(metrics, pool.map(
            lambda metric: query_metric(gf, p, gpu.uuid, metric, window), metrics),
            strict=True))
    found = [_chart(group, answers, window.step_s) for group in GROUPS]
    mig = _mig_chart(gpu, answers[MIG_ACTIVITY], window.step_s)
    return found + ([mig] if mig else [])


def retention_note(gf: Gpufleet, now: datetime, window: Window) -> str | None:
    """What the store cannot show: a window reaching back past its longest tier."""
    kept = timedelta(days=gf.settings.telemetry_hour_retention_days)
    if window.start >= now - kept:
        return None
    return (f"The telemetry store keeps {gf.settings.telemetry_hour_retention_days:g} days "
            f"of hourly data: nothing older than {(now - kept):%Y-%m-%d %H:%M} UTC is shown.")


def gpu_page(gf: Gpufleet, p: Principal, uuid: str, range_: str | None, start: str | None,
             end: str | None) -> tuple[GpuView, Window, dict[str, Section]]:
    """The GPU (404 as the API answers), the window (400 naming a bad parameter), and the
    sections, each showing its own error in place."""
    gpu = gf.get_gpu(p, uuid)
    window = window_of(gf.clock.now(), range_, start, end)
    first = f"telemetry/query?metric={GROUPS[0].lines[0].metric}"
    return gpu, window, {
        "identity": Section(api_url(f"gpus/{gpu.uuid}"), gpu),
        "charts": section(api_url(first), lambda: charts(gf, p, gpu, window)),
        "bindings": section(api_url(f"gpus/{gpu.uuid}/bindings", limit=BINDINGS_SHOWN),
                            lambda: gf.gpu_bindings(p, gpu.uuid, None, BINDINGS_SHOWN)),
    }


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/gpus/{{uuid}}")
async def gpu(request: Request, uuid: str, range: str | None = None,
              start: str | None = None, end: str | None = None,
              who: Viewer = Depends(viewer)) -> Response:
    gf = services(request)
    try:
        found, window, sections = await run_in_threadpool(
            gpu_page, gf, who.principal, uuid, range, start, end)
    except GpufleetError as exc:
        heading = "No such GPU" if exc.http_status == 404 else "Cannot show this GPU"
        return render(request, "error.html", who, exc.http_status, heading=heading,
                      message=exc.message)
    return render(request, "gpu.html", who, page_status(sections), gpu=found, window=window,
                  sections=sections, presets=PRESETS, current_page="gpu",
                  node_url=ui_url(f"nodes/{found.node}"),
                  page_url=lambda **q: ui_url(f"gpus/{found.uuid}", **q),
                  retention=retention_note(gf, gf.clock.now(), window),
                  scoped=who.principal.visible_projects is not None)
