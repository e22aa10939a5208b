"""The one error body every failure answers with (api/errors.py builds it)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="A stable snake_case identifier to switch on "
                                  "(`node_not_found`, `nul_character`, `validation_failed`)")
    message: str = Field(description="One sentence for a person, naming the problem")
    details: dict[str, Any] = Field(description="Machine-readable context: the field, the "
                                                "ids; `errors` for validation failures")


class ErrorBody(BaseModel):
    """`{"error": {"code", "message", "details"}}`, for every 4xx and 5xx."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail
