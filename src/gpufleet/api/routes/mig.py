"""MIG layouts for operators: the fleet's desired layouts as an NVIDIA mig-parted config."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from gpufleet.api.deps import principal, services
from gpufleet.services.access.principal import Principal
from gpufleet.services.app import Gpufleet
from gpufleet.services.inventory.mig_configs import MigConfigExport

router = APIRouter(prefix="/api/v1", tags=["mig"])

YAML_MEDIA_TYPE = "application/yaml"
# The YAML file as a YAML reader sees it: mig-parted's config (`mig-configs` is left out
# when no node is selected: mig-parted refuses an empty map; docs/mig.md).
MIG_PARTED_FILE_SCHEMA = {
    "type": "object", "required": ["version"],
    "properties": {"version": {"type": "string", "enum": ["v1"]},
                   "mig-configs": {"type": "object", "additionalProperties": {
                       "type": "array", "items": {"type": "object"}}}}}
_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")


def wants_json(output_format: str | None, accept: str) -> bool:
    """`?format=` wins; otherwise JSON only when Accept names JSON and no YAML type."""
    if output_format is not None:
        return output_format == "json"
    accept = accept.lower()
    return "application/json" in accept and not any(t in accept for t in _YAML_TYPES)


@router.get("/mig/configs", response_model=MigConfigExport, responses={200: {
    "description": "The mig-parted config file (YAML, the default) or, with `format=json`, "
                   "the same config with the config each node selects.",
    "content": {YAML_MEDIA_TYPE: {"schema": MIG_PARTED_FILE_SCHEMA}}}})
def export_mig_configs(
    request: Request,
    node: str | None = Query(default=None, max_length=253, description="Only this node."),
    environment: str | None = Query(default=None, max_length=63,
                                    description="Only nodes of this environment."),
    output_format: Literal["yaml", "json"] | None = Query(
        default=None, alias="format",
        description="`yaml` (the file) or `json`; without it, the Accept header decides "
                    "and YAML is the default."),
    p: Principal = Depends(principal),
    gf: Gpufleet = Depends(services),
):
    """Each node's desired MIG layout — its pending MIG plan where one exists, else what it
    reports — as an NVIDIA mig-parted config: one named config per distinct node layout,
    devices by GPU index. It pins no placements (mig-parted lets the driver choose where
    instances start), so it is an export for operators, never gpufleet's plan; nodes
    without a MIG GPU are left out."""
    export = gf.export_mig_configs(p, node=node, environment=environment)
    if wants_json(output_format, request.headers.get("accept", "")):
        return export
    return Response(export.config_yaml, media_type=YAML_MEDIA_TYPE, headers={
        "Content-Disposition": 'inline; filename="mig-parted-config.yaml"'})
