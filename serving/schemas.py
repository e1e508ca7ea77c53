"""Response models of the serving API (SPEC §4), for validation-free docs.

Routes return orjson-encoded responses built from plain dicts (fast path);
these models document the shapes in the OpenAPI schema.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class CountedWindow(BaseModel):
    """The window an aggregate read counted (SPEC §3.2): from the start of its first tile to the event time.

    ``Decayed*`` weigh all history by ``exp(-(t - s) / W)``: ``from`` is null and ``decay_s`` is ``W``.
    """

    #: ISO time, ``YYYY-MM-DDTHH:MM:SS.mmmZ``
    from_: str | None = Field(alias="from")
    to: str
    resolution_s: int
    decay_s: int | None = None


class Explained(BaseModel):
    """What one aggregate feature read (``?explain``; ``serving.evaluate.EventProgram.explain``)."""

    function: str
    state: str
    key: list[Any] | None = None
    window: CountedWindow | None = None
    writes: int | None = None


class EventResponse(BaseModel):
    """One event's answer: every feature of the event, inputs included (SPEC §4); ``explain`` with ``?explain``."""

    event_id: str
    event_time: str
    features: dict[str, Any]
    errors: dict[str, str] | None = None
    explain: dict[str, Explained] | None = None


class ErrorDetail(BaseModel):
    """The inside of an error body: a machine-readable ``code`` and a ``message`` for a person."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every 4xx/5xx answer: ``{"error": {"code", "message"}}`` and nothing else (SPEC §4)."""

    error: ErrorDetail


class Health(BaseModel):
    """``GET /health`` / ``GET /ready``."""

    status: str
