"""The New request form: "Preview" shows what the request would come to now — admission
verdicts, auto-approval, placement on the live fleet — writing nothing
(`Lifecycle.preview_request`, POST /api/v1/requests/preview); "Submit" creates it as
POST /api/v1/requests does (docs/dashboard.md, "New request")."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from gpufleet.api.web.page import UI, Viewer, checked_form, render, services, ui_url, viewer
from gpufleet.domain.access import Action, is_allowed
from gpufleet.domain.errors import GpufleetError
from gpufleet.wire.requests import RequestCreate

TEXT_FIELDS = ("project", "count", "kind", "models", "mig_profile", "fraction", "environment",
               "duration_hours", "cpu_cores_per_unit", "memory_gib_per_unit", "reason")
FLAGS = ("same_node", "nvlink")
DEFAULTS = {"count": "1", "kind": "whole", "duration_hours": "24"}
KINDS = (("whole", "Whole GPUs"), ("mig", "MIG instances"), ("shared", "Fractions of a shared GPU"))


class FormProblem(Exception):
    """The form's fields do not make a request: the message names the field."""


def body_of(fields: dict[str, str]) -> RequestCreate:
    """The API's request body from the form's fields; what the API would answer 422 to is a
    FormProblem naming the field."""
    data: dict = {"project": fields["project"].strip(), "count": fields["count"].strip()}
    data["models"] = [m.strip() for m in fields["models"].split(",") if m.strip()] or None
    kind = fields["kind"] or "whole"
    if kind == "mig":
        data["mig_profile"] = fields["mig_profile"].strip()
    elif kind == "shared":
        data["fraction"] = fields["fraction"].strip()
    elif kind != "whole":
        raise FormProblem(f"kind '{kind}' is not whole, mig or shared")
    for name in ("environment", "duration_hours", "cpu_cores_per_unit",
                 "memory_gib_per_unit", "reason"):
        if fields[name].strip():
            data[name] = fields[name].strip()
    data.update({flag: fields[flag] == "on" for flag in FLAGS})
    try:
        return RequestCreate.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the form"
        raise FormProblem(f"{where.replace('_', ' ')}: {first['msg']}") from None


def _form(request: Request, who: Viewer, fields: dict[str, str], status_code: int = 200,
          error: str | None = None, preview=None) -> Response:
    return render(request, "request_new.html", who, status_code, fields=fields, kinds=KINDS,
                  error=error, preview=preview, current_page="requests",
                  projects=sorted(who.principal.project_names))


router = APIRouter(include_in_schema=False)


@router.get(f"{UI}/requests/new")
async def new_request(request: Request, project: str = "",
                      who: Viewer = Depends(viewer)) -> Response:
    if not is_allowed(who.principal.role, Action.REQUEST_GPUS):
        return render(request, "error.html", who, 403, heading="New request",
                      message=f"role '{who.principal.role}' may not request GPUs",
                      current_page="requests")
    fields = dict.fromkeys(TEXT_FIELDS + FLAGS, "") | DEFAULTS | {"project": project}
    return _form(request, who, fields)


@router.post(f"{UI}/requests/new")
async def post_new_request(request: Request, who: Viewer = Depends(viewer)) -> Response:
    try:
        values = await checked_form(request, who, "do", *TEXT_FIELDS, *FLAGS)
    except GpufleetError as exc:
        return render(request, "error.html", who, exc.http_status, message=exc.message)
    do, fields = values[0], dict(zip(TEXT_FIELDS + FLAGS, values[1:], strict=True))
    gf = services(request)
    try:
        body = body_of(fields)
        if do == "submit":
            created = await run_in_threadpool(gf.lifecycle.create_request, who.principal, body)
            return RedirectResponse(ui_url(f"requests/{created.code}", done="created"),
                                    status_code=303)
        preview = await run_in_threadpool(gf.lifecycle.preview_request, who.principal, body)
    except FormProblem as exc:
        return _form(request, who, fields, 422, error=str(exc))
    except GpufleetError as exc:
        return _form(request, who, fields, exc.http_status, error=exc.message)
    return _form(request, who, fields, preview=preview)
