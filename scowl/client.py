"""A Python client of the scowl event API, for notebooks and services (SPEC §4, §3.5).

::

    from scowl.client import Client

    with Client("http://127.0.0.1:8000", api_key="...") as scowl:
        r = scowl.enrich("departure", origin="JFK", dest="LAX", carrier="AA", flight=1,
                         _time=datetime(2013, 1, 1, 10, 17, tzinfo=timezone.utc))
        r.features["departures_1h"]       # int
        r.features["prev_dep_time"]       # datetime (UTC) or None
        peek = scowl.query("departure", origin="JFK", explain=True)   # computes, stores nothing

What it sends (SPEC §4, and the same requests as the real ``sumatra-sdk``'s
``SDKClient``, whose method names and argument shapes it mirrors:
``enrich(event_type, **event)``, ``enrich_batch(event_type, events)``,
``track``, ``track_batch``):

* :meth:`Client.enrich` -> ``POST /event`` with the event as a JSON object
  (``_type``, optional ``_time`` and ``_id``, the input fields);
* :meth:`Client.enrich_batch` -> ``POST /batch`` with a JSON array;
* :meth:`Client.query` -> ``POST /event?dry_run`` (``?dry_run&explain`` with
  ``explain=True``): the server computes what a real post would get now and
  stores nothing; :meth:`Client.query_batch` -> ``POST /batch?dry_run``. A
  server without the read-only mode would ignore the flag and *store* the
  event, so before its first query a client reads ``GET /openapi.json`` once
  and refuses (``ScowlError`` ``dry-run-unsupported``, nothing posted)
  unless ``POST /event`` lists ``dry_run``;
* :meth:`Client.topology` -> ``GET /topology``;
* every request carries ``x-api-key`` when an API key is given.

What it returns: :class:`EnrichResult`, whose feature values are decoded
from the JSON encodings of SPEC §3.1/§3.5 using each feature's type from
``GET /topology`` (fetched once per client, cached): ``time`` ->
:class:`datetime.datetime` (UTC, timezone-aware), ``duration`` ->
:class:`datetime.timedelta`, ``tuple{…}`` -> :class:`tuple`, ``array<T>`` ->
list of decoded ``T``, ``struct{a:T,…}`` -> dict of decoded fields; ``int``,
``float``, ``bool``, ``string`` and any type this module does not know pass
through unchanged, and so does a value that does not decode (a time outside
the years 1-9999, for instance). Type names are spelled as in
``compiler.typesystem.parse_type``; this module parses them itself so that it
needs nothing but ``httpx`` and the standard library.

Errors: every 4xx/5xx answer (body ``{"error": {"code", "message"}}``, SPEC
§4), a connection failure, a timeout and an answer that is not the API's JSON
all raise :class:`ScowlError`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any

import httpx

__all__ = [
    "Client",
    "EnrichResult",
    "FeatureExplain",
    "ScowlError",
    "Window",
    "decode_value",
    "encode_time",
    "parse_time",
]

#: Default seconds to wait for the server (connect, read, write, pool), per request.
DEFAULT_TIMEOUT = 30.0


# ----------------------------------------------------------------------- errors
class ScowlError(Exception):
    """Any failure of a request to the scowl API: an error answer, no answer, or a malformed answer.

    Attributes:
        status: the HTTP status of an error answer (400, 401, 413, 503 …), or
            ``None`` when there was no HTTP answer (connection refused, DNS
            failure, timeout).
        code: the API's machine-readable code from the body
            ``{"error": {"code", "message"}}`` (SPEC §4), e.g. ``unauthorized``,
            ``unknown-type``, ``bad-time``, ``store-unavailable``. Codes made
            by this client: ``connection-failed`` and ``timeout`` (status
            ``None``), ``bad-response`` (an answer that is not the API's JSON),
            ``http-<status>`` (an error answer without the API's error body,
            e.g. from a proxy).
        message: the explanation for a person (the API's ``message``).

    ``str(err)`` is ``"<status> <code>: <message>"`` (``"<code>: <message>"``
    without a status).
    """

    def __init__(self, status: int | None, code: str, message: str):
        self.status = status
        self.code = code
        self.message = message
        super().__init__(f"{status} {code}: {message}" if status is not None else f"{code}: {message}")

    def __reduce__(self):  # picklable (multiprocessing, notebooks' parallel helpers)
        return (type(self), (self.status, self.code, self.message))


# ------------------------------------------------------------------------- time
def encode_time(value: datetime | date) -> str:
    """Encode a datetime as the API's time text ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (SPEC §3.1, §3.5).

    Args:
        value: a timezone-aware :class:`~datetime.datetime` (converted to UTC),
            a naive one (**taken as UTC**, as the server takes an ISO text
            without offset, SPEC §2.2), or a :class:`~datetime.date` (its
            midnight UTC).

    Returns:
        The ISO-8601 UTC text with milliseconds; microseconds are truncated to
        milliseconds (the server also drops digits past the millisecond).

    >>> encode_time(datetime(2013, 1, 1, 10, 17, 0, 123999))
    '2013-01-01T10:17:00.123Z'
    """
    if not isinstance(value, datetime):
        value = datetime(value.year, value.month, value.day)
    if value.tzinfo is not None and value.utcoffset() is not None:
        value = value.astimezone(timezone.utc)
    return (f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:{value.minute:02d}:"
            f"{value.second:02d}.{value.microsecond // 1000:03d}Z")


def parse_time(text: str) -> datetime:
    """Parse the API's time text (``2013-01-01T10:17:00.000Z``, or any ISO-8601 text) into a UTC datetime.

    Args:
        text: ISO-8601; without an offset it is taken as UTC (SPEC §2.2).

    Returns:
        A timezone-aware :class:`~datetime.datetime` in UTC.

    Raises:
        ValueError: not ISO-8601, or a year outside 1…9999 (Python's range;
            the API can print year 0000).

    >>> parse_time("2013-01-01T10:17:00.000Z")
    datetime.datetime(2013, 1, 1, 10, 17, tzinfo=datetime.timezone.utc)
    """
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def _json_default(obj: Any) -> Any:
    """``json.dumps`` hook: datetimes and dates as time text (:func:`encode_time`), timedeltas as float seconds."""
    if isinstance(obj, (datetime, date)):
        return encode_time(obj)
    if isinstance(obj, timedelta):
        return obj.total_seconds()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable: {obj!r}")


# ------------------------------------------------------------------------ types
def _split_top(s: str) -> list[str]:
    """Split ``s`` at the commas outside ``<…>`` / ``{…}``."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "<{":
            depth += 1
        elif c in ">}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    if s.strip():
        parts.append(s[start:].strip())
    return parts


def _parse_type(type_name: str) -> tuple[str, Any]:
    """``("scalar", name)``, ``("array", T)``, ``("tuple", [T…])`` or ``("struct", [(field, T)…])``.

    The spelling of ``compiler.typesystem.parse_type``: ``array<T>``,
    ``tuple{T1,T2}`` (or ``tuple<…>``), ``struct{a:T1,b:T2}``. Anything else
    (including malformed text) is a scalar of that name.
    """
    t = type_name.strip()
    if t.startswith("array<") and t.endswith(">"):
        return "array", t[6:-1].strip()
    if (t.startswith("tuple<") and t.endswith(">")) or (t.startswith("tuple{") and t.endswith("}")):
        return "tuple", _split_top(t[6:-1])
    if t.startswith("struct{") and t.endswith("}"):
        fields = []
        for part in _split_top(t[7:-1]):
            name, sep, ftype = part.partition(":")
            if not sep:
                return "scalar", t
            fields.append((name.strip(), ftype.strip()))
        return "struct", fields
    return "scalar", t


def decode_value(value: Any, type_name: str | None) -> Any:
    """Decode one JSON feature value by its scowl type (the inverse of SPEC §3.1/§3.5's encodings).

    Args:
        value: the decoded JSON value from a response (``None`` allowed anywhere).
        type_name: the feature's type as ``GET /topology`` spells it
            (``time``, ``duration``, ``array<struct{at:time,gap:duration}>`` …),
            or ``None`` when unknown.

    Returns:
        ``time`` text -> timezone-aware UTC :class:`~datetime.datetime`;
        ``duration`` float seconds -> :class:`~datetime.timedelta`;
        ``array<T>`` -> list of decoded items; ``tuple{…}`` -> :class:`tuple`
        of decoded items; ``struct{…}`` -> dict with each known field decoded
        (fields the type does not name are kept as they are). ``None`` stays
        ``None``; other types, unknown types, and values that do not decode
        (wrong JSON kind, time outside years 1…9999, duration beyond
        :class:`~datetime.timedelta`'s range) are returned unchanged. Never raises.

    >>> decode_value(90.5, "duration")
    datetime.timedelta(seconds=90, microseconds=500000)
    >>> decode_value([["2013-01-01T00:00:00.000Z", "a"]], "array<tuple{time,string}>")
    [(datetime.datetime(2013, 1, 1, 0, 0, tzinfo=datetime.timezone.utc), 'a')]
    """
    if value is None or type_name is None:
        return value
    kind, param = _parse_type(type_name)
    if kind == "scalar":
        if param == "time" and isinstance(value, str):
            try:
                return parse_time(value)
            except ValueError:
                return value
        if param == "duration" and isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return timedelta(seconds=value)
            except (OverflowError, ValueError):
                return value
        return value
    if kind == "array" and isinstance(value, list):
        return [decode_value(v, param) for v in value]
    if kind == "tuple" and isinstance(value, list):
        return tuple(decode_value(v, t) for v, t in zip(value, param)) + tuple(value[len(param):])
    if kind == "struct" and isinstance(value, dict):
        types = dict(param)
        return {k: decode_value(v, types.get(k)) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class Window:
    """The window an aggregate read covered, from ``explain`` (wire: ``{"from", "to", "resolution_s"}``).

    Attributes:
        start: the wire's ``from`` (``from`` is a Python keyword): the start
            of the first tile counted, UTC-aware :class:`~datetime.datetime`.
        end: the wire's ``to``: the read time (the event time), UTC-aware.
        resolution_s: the aggregate's resolution ``r`` in seconds (SPEC §3.2).
        decay: for ``Decayed*``, which weigh all history by
            ``exp(-(t - s) / W)`` (``start`` is then ``None``): ``W`` as a
            :class:`~datetime.timedelta`; ``None`` otherwise.

    Serving's ``CountedWindow`` (serving/schemas.py) is the wire model.
    """

    start: datetime | None
    end: datetime | None
    resolution_s: int | float | None
    decay: timedelta | None = None


@dataclass(frozen=True)
class FeatureExplain:
    """How one feature was computed, from ``POST /event?dry_run&explain`` (one entry of ``explain``).

    Attributes:
        function: the aggregate function (``Count``, ``Sum`` …).
        state: the id of the state the read came from (the aggregate's
            definition hash, SPEC §5.4).
        key: the entity key read, one value per ``by`` key, or ``None`` (a
            null key component: nothing read, SPEC §2.4).
        window: the range counted (SPEC §3.2, ``after`` applied), ``None``
            with a null key.
        writes: how many writes counted where the state holds that count
            (``Count``, ``Average``, write logs: ``limit n``, ``Sequence``,
            ``Set``, ``Latest*``), else ``None`` (``Sum``, ``Min``, ``Max``,
            ``First*``, ``CountUnique``, ``HyperLogLog``, ``Decayed*``).
        raw: the entry as received (holds any field this class does not name).

    Source: docs/semantics.md §8 (``explain``); serving's ``Explained``
    (serving/schemas.py) is the wire model.
    """

    function: str | None
    state: str | None
    key: list[Any] | None
    window: Window | None
    writes: int | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


@dataclass(frozen=True)
class EnrichResult:
    """One event's answer from :meth:`Client.enrich`, :meth:`Client.enrich_batch` or :meth:`Client.query`.

    Attributes:
        event_id: the event's id (its ``_id``, else the server's).
        event_time: the event time ``t``, UTC-aware (SPEC §3.1).
        features: every feature of the event, inputs included, decoded by
            type (:func:`decode_value`): name -> value.
        errors: feature name -> error message (empty when the server sent no
            ``errors``, SPEC §4).
        explain: feature name -> :class:`FeatureExplain`, only from
            ``query(..., explain=True)``; else ``None``.
        raw: the response object as received (JSON-decoded, undecoded values).

    ``result["name"]`` is ``result.features["name"]``.
    """

    event_id: str
    event_time: datetime | str
    features: dict[str, Any]
    errors: dict[str, str] = field(default_factory=dict)
    explain: dict[str, FeatureExplain] | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        """The decoded value of feature ``name``.

        Raises:
            KeyError: the event has no such feature.
        """
        return self.features[name]


def _maybe_time(text: Any) -> Any:
    """:func:`parse_time` of a string that parses; anything else unchanged."""
    if isinstance(text, str):
        try:
            return parse_time(text)
        except ValueError:
            return text
    return text


def _explain_entry(entry: Any) -> FeatureExplain:
    """One ``explain`` entry of the wire (serving's ``Explained``) as a :class:`FeatureExplain`."""
    if not isinstance(entry, dict):
        return FeatureExplain(None, None, None, None, None, {"value": entry})
    w = entry.get("window")
    window = None
    if isinstance(w, dict):
        decay = w.get("decay_s")
        window = Window(_maybe_time(w.get("from")), _maybe_time(w.get("to")), w.get("resolution_s"),
                        None if decay is None else timedelta(seconds=decay))
    return FeatureExplain(entry.get("function"), entry.get("state"), entry.get("key"), window,
                          entry.get("writes"), entry)


# ----------------------------------------------------------------------- client
class Client:
    """A synchronous client of the scowl event API (SPEC §4); also a context manager.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000`` (the
            sumatra-sdk's ``api_uri``).
        api_key: sent as the ``x-api-key`` header on every request; ``None``
            sends none (a server without ``SCOWL_API_KEYS``).
        timeout: seconds to wait per request (connect, send, answer); a
            ``/batch`` of many events needs more than one event.

    One HTTP connection pool is kept open: call :meth:`close`, or use
    ``with Client(...) as c:``. The feature types of ``GET /topology`` are
    fetched on the first call that needs them and cached (refetched when an
    event type is missing, e.g. after the server restarted on a new topology).

    Method names and argument shapes follow the sumatra-sdk's ``SDKClient``
    (``enrich(event_type, **event)``, ``enrich_batch(event_type, events)``,
    ``track``, ``track_batch``); results are typed (:class:`EnrichResult`)
    rather than raw dicts (``EnrichResult.raw`` has the dict).
    """

    def __init__(self, url: str, api_key: str | None = None, timeout: float = DEFAULT_TIMEOUT):
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        headers = {"user-agent": "scowl-client", "accept": "application/json"}
        if api_key is not None:
            headers["x-api-key"] = api_key
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._topology: dict[str, Any] | None = None
        self._types: dict[str, dict[str, str]] = {}
        self._dry_run_checked = False

    # -- lifecycle
    def close(self) -> None:
        """Close the connection pool (idempotent). The client cannot be used afterwards."""
        self._http.close()

    def __enter__(self) -> Client:
        """Return the client itself (``with Client(...) as c:``)."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """:meth:`close` (exceptions propagate)."""
        self.close()

    def __repr__(self) -> str:
        """``Client(url, api_key=***)``: the key itself is never shown."""
        return f"Client({self.url!r}, api_key={'***' if self.api_key is not None else None})"

    # -- HTTP
    def _request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; return the decoded JSON answer.

        Raises:
            ScowlError: error answer, no answer, or an answer that is not JSON.
            TypeError, ValueError: ``body`` holds a value JSON cannot encode
                (NaN, infinity, an arbitrary object).
        """
        content = None
        headers = None
        if body is not None:
            content = json.dumps(body, default=_json_default, allow_nan=False, ensure_ascii=False).encode()
            headers = {"content-type": "application/json"}
        try:
            resp = self._http.request(method, path, content=content, headers=headers)
        except httpx.TimeoutException as e:
            raise ScowlError(None, "timeout", f"{method} {self.url}{path}: no answer within {self.timeout} s "
                                              f"({type(e).__name__})") from e
        except httpx.TransportError as e:
            raise ScowlError(None, "connection-failed",
                             f"cannot reach the scowl server at {self.url} ({method} {path}): "
                             f"{e or type(e).__name__}") from e
        if resp.status_code >= 400:
            raise _error_from(resp)
        try:
            return resp.json()
        except ValueError:
            raise ScowlError(resp.status_code, "bad-response",
                             f"{method} {path} answered {resp.status_code} with a body that is not JSON: "
                             f"{resp.text[:200]!r}") from None

    # -- topology
    def topology(self, refresh: bool = False) -> dict[str, Any]:
        """Return ``GET /topology``: the served events, their features, types, windows and resolutions.

        Args:
            refresh: fetch it again instead of using the cached copy.

        Returns:
            The JSON object as served: ``{"events": {name: {"features":
            [{"name", "type", "kind", ...aggregates: "function", "window_s",
            "resolution_s", "scopes", "limit", "exclusive", ...}],
            "query_event": bool}}}`` (serving/routes/meta.py, SPEC §4).

        Raises:
            ScowlError: as :meth:`enrich`.
        """
        if self._topology is None or refresh:
            topo = self._request("GET", "/topology")
            if not isinstance(topo, dict) or not isinstance(topo.get("events"), dict):
                raise ScowlError(200, "bad-response", "GET /topology did not answer {\"events\": {...}}")
            self._topology = topo
            self._types = {
                name: {f["name"]: f.get("type") for f in ev.get("features", []) if isinstance(f, dict) and "name" in f}
                for name, ev in topo["events"].items() if isinstance(ev, dict)
            }
        return self._topology

    def feature_types(self, event_type: str) -> dict[str, str]:
        """Return feature name -> type name (``int``, ``time``, ``array<string>`` …) of one event type.

        Args:
            event_type: a served event type.

        Returns:
            The types from ``GET /topology`` (cached; refetched once when the
            type is missing).

        Raises:
            ScowlError: as :meth:`topology`; 400 ``unknown-type`` (made by
                this client) when the server does not serve ``event_type``.
        """
        types = self._types_for(event_type)
        if types is None:
            raise ScowlError(400, "unknown-type", f"the server has no event type {event_type!r}")
        return dict(types)

    def _types_for(self, event_type: Any) -> dict[str, str] | None:
        """The cached types of ``event_type``, fetching / refetching the topology once if it is missing."""
        if not isinstance(event_type, str):
            return None
        if self._topology is None or event_type not in self._types:
            self.topology(refresh=True)
        return self._types.get(event_type)

    def _result(self, event_type: str, body: Any, what: str) -> EnrichResult:
        """Build the typed result of one response object (``bad-response`` when it is not one)."""
        if not isinstance(body, dict) or "event_id" not in body or "event_time" not in body:
            raise ScowlError(200, "bad-response", f"{what} answered {json.dumps(body)[:200]} (no event_id/event_time)")
        types = self._types.get(event_type, {})
        raw_features = body.get("features") or {}
        features = {k: decode_value(v, types.get(k)) for k, v in raw_features.items()}
        explain = None
        if isinstance(body.get("explain"), dict):
            explain = {k: _explain_entry(v) for k, v in body["explain"].items()}
        return EnrichResult(
            event_id=str(body["event_id"]),
            event_time=_maybe_time(body["event_time"]),
            features=features,
            errors=dict(body.get("errors") or {}),
            explain=explain,
            raw=body,
        )

    # -- events
    @staticmethod
    def _event(event_type: str, event: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
        """The JSON object of one event: ``event``'s fields, then ``fields``, then ``_type``.

        A new dict: the caller's are never modified (the sumatra-sdk writes ``_type`` into them).
        """
        if not isinstance(event_type, str):
            raise TypeError(f"event type should be a string, not {type(event_type).__name__}")
        if event is not None and not isinstance(event, Mapping):
            raise TypeError(f"event should be a dict of fields, not {type(event).__name__}")
        body = {**(event or {}), **fields}
        if "_type" in body and body["_type"] != event_type:
            raise ValueError(f"event has _type {body['_type']!r} but event type {event_type!r} was given")
        body["_type"] = event_type
        return body

    def enrich(self, event_type: str, event: Mapping[str, Any] | None = None, **fields: Any) -> EnrichResult:
        """Send one event (``POST /event``): its features are computed and its contribution is stored.

        Args:
            event_type: the event's type (its ``_type``).
            event: the event's fields as a dict (optional); ``fields`` are
                added to it (and win on a clash). A field named ``event`` or
                ``event_type`` must go in this dict.
            **fields: the event's input fields (JSON values, datetimes,
                dates), plus optionally ``_time`` -- a
                :class:`~datetime.datetime` (timezone-aware, or naive =
                **UTC**), a :class:`~datetime.date`, an ISO-8601 string or
                epoch milliseconds (int); default: the server's clock on
                arrival (SPEC §3.1) -- and ``_id``, the idempotency key (a
                repeated ``_id`` is answered but not written twice, SPEC §4).
                Datetimes anywhere in the event are sent as
                ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (:func:`encode_time`).

        Returns:
            :class:`EnrichResult`: ``event_id``, ``event_time`` (UTC
            datetime), every feature decoded by type (``time`` -> datetime,
            ``duration`` -> timedelta …, :func:`decode_value`), ``errors``.

        Raises:
            ScowlError: an error answer (400 ``unknown-type``, ``missing-type``,
                ``bad-time``…; 401 ``unauthorized``; 413 ``body-too-large``;
                503 ``store-unavailable``: SPEC §4), ``connection-failed`` or
                ``timeout`` (status ``None``), ``bad-response``.
            TypeError: ``event_type`` is not a string, or a field value JSON
                cannot encode.
            ValueError: ``_type`` in the event differs from ``event_type``;
                a NaN or infinite float.
        """
        body = self._event(event_type, event, fields)
        self._types_for(event_type)
        return self._result(event_type, self._request("POST", "/event", body), "POST /event")

    def _require_dry_run(self) -> None:
        """Make sure the server has the read-only mode before the first query posts anything (once per client).

        A server without it would ignore ``?dry_run`` (unknown query
        parameters are ignored) and *store* the event. Its OpenAPI document
        (``GET /openapi.json``, served by every scowl and sent the API key)
        lists ``dry_run`` among the parameters of ``POST /event`` exactly
        when it has the mode.

        Raises:
            ScowlError: ``dry-run-unsupported`` when the document lacks the
                parameter or cannot be read (nothing was posted); the
                errors of :meth:`enrich` when the server cannot be reached.
        """
        if self._dry_run_checked:
            return
        why = "its OpenAPI document does not list the dry_run flag of POST /event"
        try:
            spec = self._request("GET", "/openapi.json")
        except ScowlError as e:
            if e.status is None:
                raise
            spec, why = None, f"GET /openapi.json answered {e.status} {e.code}"
        params = []
        try:
            params = [p.get("name") for p in spec["paths"]["/event"]["post"].get("parameters", [])]  # type: ignore[index]
        except (KeyError, TypeError, AttributeError):
            pass
        if "dry_run" not in params:
            raise ScowlError(None, "dry-run-unsupported",
                             f"the server at {self.url} has no read-only mode ({why}): a query there would store "
                             f"the event, so nothing was sent; upgrade scowl serve")
        self._dry_run_checked = True

    def query(self, event_type: str, event: Mapping[str, Any] | None = None, *, explain: bool = False,
              **fields: Any) -> EnrichResult:
        """Compute an event's features without storing anything (``POST /event?dry_run``).

        The server answers what a real :meth:`enrich` of the same event would
        get now (the event's own contribution included where the aggregate is
        inclusive, SPEC §3.3), but writes nothing: not the event's
        contribution, not its ``_id``. Use it to look features up (``by`` a
        key) from a notebook or a read-only service.

        Args:
            event_type, event, fields: as :meth:`enrich` (a field named
                ``explain`` must go in ``event``).
            explain: also ask how each aggregate was read
                (``POST /event?dry_run&explain``).

        Returns:
            :class:`EnrichResult`; with ``explain=True`` its ``explain`` maps
            each aggregate feature to a :class:`FeatureExplain` (function,
            state, key, window with UTC datetimes, count of writes).

        Raises:
            ScowlError: as :meth:`enrich`; ``bad-response`` when
                ``explain=True`` and the answer carries no ``explain``;
                ``dry-run-unsupported`` (before anything is posted) when the
                server has no read-only mode (:meth:`_require_dry_run`).
            TypeError, ValueError: as :meth:`enrich`.
        """
        body = self._event(event_type, event, fields)
        self._types_for(event_type)
        self._require_dry_run()
        path = "/event?dry_run&explain" if explain else "/event?dry_run"
        result = self._result(event_type, self._request("POST", path, body), f"POST {path}")
        if explain and result.explain is None:
            raise ScowlError(200, "bad-response", f"POST {path} answered without \"explain\"")
        return result

    def enrich_batch(self, event_type: str | Sequence[Any],
                     events: Iterable[Mapping[str, Any]] | None = None) -> list[EnrichResult]:
        """Send events in one request (``POST /batch``), processed in order (SPEC §4).

        Two shapes:

        * ``enrich_batch("login", [{...}, {...}])`` -- the sumatra-sdk's: one
          event type for every event (each dict's ``_type`` is set to it,
          on a copy; a different ``_type`` already there is a ``ValueError``);
        * ``enrich_batch([{"_type": "login", ...}, ("logout", {...}), ...])``
          -- mixed types: each item a dict with ``_type`` or an
          ``(event_type, fields)`` pair.

        Each event may carry ``_time`` and ``_id`` as in :meth:`enrich`.

        Args:
            event_type: the events' type, or the list of events (second shape).
            events: the events (first shape); leave out for the second.

        Returns:
            One :class:`EnrichResult` per event, in input order.

        Raises:
            ScowlError: as :meth:`enrich`; the server validates every event
                before writing any (a 400's message starts ``event <index>:``),
                plus 400 ``not-an-array`` and 413 ``batch-too-large``.
            TypeError, ValueError: as :meth:`enrich`; an item that is neither
                a dict with a string ``_type`` nor a pair.
        """
        return self._batch("/batch", event_type, events)

    def query_batch(self, event_type: str | Sequence[Any], events: Iterable[Mapping[str, Any]] | None = None,
                    *, explain: bool = False) -> list[EnrichResult]:
        """:meth:`query` for many events in one request (``POST /batch?dry_run``, ``&explain``).

        Each event is computed alone against the store as it is: nothing is
        stored, so an event does **not** see the batch's earlier events
        (unlike :meth:`enrich_batch`).

        Args:
            event_type, events: as :meth:`enrich_batch` (both shapes).
            explain: add each event's ``explain`` (see :meth:`query`).

        Returns:
            One :class:`EnrichResult` per event, in input order.

        Raises:
            ScowlError, TypeError, ValueError: as :meth:`enrich_batch`;
                ``bad-response`` when ``explain=True`` and an answer carries
                no ``explain``.
        """
        self._require_dry_run()
        path = "/batch?dry_run&explain" if explain else "/batch?dry_run"
        results = self._batch(path, event_type, events)
        if explain and any(r.explain is None for r in results):
            raise ScowlError(200, "bad-response", f"POST {path} answered without \"explain\"")
        return results

    def _batch(self, path: str, event_type: str | Sequence[Any],
               events: Iterable[Mapping[str, Any]] | None) -> list[EnrichResult]:
        """Post the events of either :meth:`enrich_batch` shape to ``path``; return the typed answers."""
        if isinstance(event_type, str):
            if events is None:
                raise TypeError("enrich_batch(event_type, events): events missing")
            items = [(event_type, ev) for ev in events]
        else:
            if events is not None:
                raise TypeError("enrich_batch(events) takes the events alone, or (event_type, events)")
            items = []
            for i, ev in enumerate(event_type):
                if isinstance(ev, Mapping):
                    if not isinstance(ev.get("_type"), str):
                        raise ValueError(f"event {i} has no _type (give enrich_batch(event_type, events) instead)")
                    items.append((ev["_type"], ev))
                elif isinstance(ev, (tuple, list)) and len(ev) == 2:
                    items.append((ev[0], ev[1]))
                else:
                    raise TypeError(f"event {i} should be a dict with _type or an (event_type, fields) pair")
        bodies = [self._event(t, ev, {}) for t, ev in items]
        for t in dict.fromkeys(t for t, _ in items):
            self._types_for(t)
        answer = self._request("POST", path, bodies)
        if not isinstance(answer, list) or len(answer) != len(bodies):
            raise ScowlError(200, "bad-response", f"POST {path} of {len(bodies)} events answered "
                                                  f"{json.dumps(answer)[:200]}")
        return [self._result(t, body, f"POST {path} (event {i})")
                for i, ((t, _), body) in enumerate(zip(items, answer))]

    def track(self, event_type: str, event: Mapping[str, Any] | None = None, **fields: Any) -> None:
        """:meth:`enrich`, discarding the answer (the sumatra-sdk's ``track``).

        Raises:
            ScowlError, TypeError, ValueError: as :meth:`enrich`.
        """
        self.enrich(event_type, event, **fields)

    def track_batch(self, event_type: str | Sequence[Any], events: Iterable[Mapping[str, Any]] | None = None) -> None:
        """:meth:`enrich_batch`, discarding the answers (the sumatra-sdk's ``track_batch``).

        Raises:
            ScowlError, TypeError, ValueError: as :meth:`enrich_batch`.
        """
        self.enrich_batch(event_type, events)


def _error_from(resp: httpx.Response) -> ScowlError:
    """The :class:`ScowlError` of an error answer.

    Its ``{"error": {"code", "message"}}`` (SPEC §4) when the body is that,
    else code ``http-<status>`` and the start of the body as the message.
    """
    try:
        err = resp.json().get("error")
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            return ScowlError(resp.status_code, err["code"], str(err.get("message", "")))
    except (ValueError, AttributeError):
        pass
    text = resp.text.strip()[:200] or resp.reason_phrase
    where = f"{resp.request.method} {resp.request.url.path}"
    return ScowlError(resp.status_code, f"http-{resp.status_code}", f"{where}: {text}")

