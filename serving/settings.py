"""Serving configuration (SPEC §6): environment variables with the ``SCOWL_`` prefix."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from compiler.algebra.storekeys import DEFAULT_ID_TTL_S
from compiler.algebra.windows import ALLOWED_LATENESS_S


class SettingsError(ValueError):
    """A ``SCOWL_*`` setting has a value it cannot take; the message names each variable (one line)."""


class Settings(BaseSettings):
    """Settings of ``scowl serve``.

    Attributes:
        redis_url: ``SCOWL_REDIS_URL``; ``None`` means the embedded server.
        api_keys: ``SCOWL_API_KEYS``, comma-separated; empty means no auth.
            Several keys are accepted at once (rotation).
        auth_all: ``SCOWL_AUTH_ALL``: with keys set, require one on every
            path but ``/health`` and ``/ready`` (``/metrics``, ``/topology``,
            ``/docs``, ``/openapi.json`` too), not only on ``/event`` and
            ``/batch``. The explorer under ``/ui`` (when installed) then
            checks the key itself, from the header or its login cookie, and
            leaves its login page and static files open (``scowl.ui.auth``).
        home: ``SCOWL_HOME``, state directory of the embedded server.
        max_body_bytes: ``SCOWL_MAX_BODY_BYTES``: largest accepted request
            body in bytes (413 ``body-too-large`` above; default 10 MiB).
        max_batch: ``SCOWL_MAX_BATCH``: largest accepted ``/batch`` array
            (413 ``batch-too-large`` above; default 100,000 events).
        batch_pipeline: ``SCOWL_BATCH_PIPELINE``: events per pipelined
            chunk of ``POST /batch`` (default 64; 0: one script call at a
            time). Values are the same either way; a pipelined batch has
            one round trip per chunk, and builds the next chunk's calls
            while the store runs this one's (standalone store only).
        id_ttl_s: how long an ``_id`` is remembered for idempotency (seconds).
        store_timeout_s: Redis socket timeout (seconds).
        allowed_lateness: ``SCOWL_ALLOWED_LATENESS``, seconds (SPEC §3.3,
            default 3600): online values are exact for events up to this
            late; states keep that much more history (tiles of ``W + r + L``,
            raw entries of the last ``L``). Later events are answered from
            what the store still holds and counted in
            ``scowl_late_events_total``.
        event_stream: ``SCOWL_EVENT_STREAM``: a Redis stream key in the store
            to which every accepted event that writes state is appended
            (``XADD``, inside the event's own script call) for ``scowl stream
            --source redis:KEY``. That stream job must write to *another*
            store (the API has already counted these events in this one).
            ``None``: nothing appended.
        event_stream_maxlen: ``SCOWL_EVENT_STREAM_MAXLEN``: each append
            trims that stream to about this many entries (``XADD ... MAXLEN
            ~ N``: Valkey drops whole macro nodes, so up to ~100 more stay).
            ``None`` (default): the stream keeps every entry until its
            reader trims it (``scowl stream --trim-source``). A stream job
            that falls further behind than the cap stops and says so
            (``writer.redis_source``).
        ui: ``SCOWL_UI``: serve the feature explorer under ``/ui`` (default
            true; ``scowl.ui``).
        ui_auth: ``SCOWL_UI_AUTH``: with keys set, the explorer asks for an
            accepted ``x-api-key`` (header, or the ``scowl_api_key`` cookie
            its login form sets); default false: open, like ``/topology``.
    """

    model_config = SettingsConfigDict(env_prefix="SCOWL_", extra="ignore")

    redis_url: str | None = None
    api_keys: str = ""
    auth_all: bool = False
    home: str = ".scowl"
    max_body_bytes: int = Field(default=10 * 1024 * 1024, ge=1024)
    max_batch: int = Field(default=100_000, ge=1)
    batch_pipeline: int = Field(default=64, ge=0)
    id_ttl_s: int = Field(default=DEFAULT_ID_TTL_S, ge=1)
    store_timeout_s: float = Field(default=2.0, gt=0)
    event_stream: str | None = None
    event_stream_maxlen: int | None = Field(default=None, ge=1)
    allowed_lateness: int = Field(default=ALLOWED_LATENESS_S, ge=0)
    ui: bool = True
    ui_auth: bool = False

    def key_set(self) -> frozenset[str]:
        """Return the accepted API keys (empty: auth disabled)."""
        return frozenset(k.strip() for k in self.api_keys.split(",") if k.strip())

    @classmethod
    def load(cls, **overrides: Any) -> "Settings":
        """Read the settings from the environment, ``overrides`` (field names) winning.

        Returns:
            The settings.

        Raises:
            SettingsError: a value out of range or of the wrong type, e.g.
                ``SCOWL_EVENT_STREAM_MAXLEN=0: Input should be greater than or
                equal to 1``: what ``scowl serve`` reports as a user error,
                not as a pydantic traceback.
        """
        try:
            return cls(**overrides)
        except ValidationError as e:
            problems = []
            for err in e.errors():
                name = "SCOWL_" + "_".join(str(p) for p in err.get("loc", ())).upper()
                value = err.get("input")
                shown = f"={value}" if isinstance(value, (str, int, float)) else ""
                problems.append(f"{name}{shown}: {err.get('msg', 'invalid')}")
            raise SettingsError("; ".join(problems)) from None
