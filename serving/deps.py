"""FastAPI dependencies: the evaluator, the store, the API-key check and the query flags.

All are ``async def`` although none awaits: FastAPI runs a plain ``def``
dependency in its thread pool, a thread hand-off per dependency per request
(measured by ``bench/serve.py``: two such flag dependencies cost ~20% of
``POST /event``'s events/s on the demo topology).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Annotated, Iterable

from fastapi import Depends, Header, Query, Request

from serving.errors import ApiError
from serving.evaluate import Evaluator
from serving.store import Store


async def get_evaluator(request: Request) -> Evaluator:
    """Return the app's :class:`Evaluator` (built in the lifespan)."""
    return request.app.state.evaluator


async def get_store(request: Request) -> Store:
    """Return the app's :class:`Store`."""
    return request.app.state.store


class ApiKeys:
    """The accepted API keys, checked in constant time (``SCOWL_API_KEYS``).

    Several keys may be accepted at once, so a key is rotated without
    downtime: add the new one, move the clients, remove the old one. A
    presented key is compared with *every* accepted key, each comparison
    over SHA-256 digests with ``hmac.compare_digest``: how long a check
    takes depends neither on which key matched, nor on how much of a key
    was right, nor on its length.

    Args:
        keys: the accepted keys (strings); none disables authentication.

    Source: Python ``hmac.compare_digest`` (constant-time comparison);
    OWASP, "Authentication Cheat Sheet" (timing attacks on secrets).
    """

    def __init__(self, keys: Iterable[str]):
        self._digests = tuple(hashlib.sha256(k.encode("utf-8")).digest() for k in sorted(set(keys)))

    def __bool__(self) -> bool:
        """Whether authentication is on (at least one key)."""
        return bool(self._digests)

    def accepts(self, given: str | None) -> bool:
        """Whether ``given`` (the ``x-api-key`` header, ``None`` when absent) is an accepted key.

        Always true when no key is configured.
        """
        if not self._digests:
            return True
        digest = hashlib.sha256((given or "").encode("utf-8", "surrogateescape")).digest()
        ok = False
        for d in self._digests:  # no early exit
            ok |= hmac.compare_digest(digest, d)
        return ok and given is not None


#: Paths answered without the key even with ``SCOWL_AUTH_ALL`` (probes of process managers).
OPEN_PATHS = frozenset({"/health", "/ready"})


async def check_api_key(request: Request, x_api_key: Annotated[str | None, Header()] = None) -> None:
    """Require a valid ``x-api-key`` header when ``SCOWL_API_KEYS`` is set (:class:`ApiKeys`).

    Raises:
        ApiError: 401 ``unauthorized``.
    """
    if not request.app.state.api_keys.accepts(x_api_key):
        raise ApiError(401, "unauthorized", "missing or wrong x-api-key header")


#: Flag values read as true / false, compared after ``strip().lower()``. The
#: empty string is a bare (``?features``) or empty (``?features=``) flag.
TRUE_VALUES = frozenset({"", "true", "1", "yes", "on"})
FALSE_VALUES = frozenset({"false", "0", "no", "off"})


def parse_flag(name: str, value: str | None) -> bool | None:
    """Read a boolean query flag in every form Sumatra's clients send (SPEC §4).

    Args:
        name: the flag's name (for the error message).
        value: its raw value: ``None`` when the flag is absent, ``""`` when it
            is bare (``?exports``) or empty (``?exports=``). With the flag
            repeated, the last value counts.

    Returns:
        ``None`` when absent; ``True`` for bare, empty, ``true``, ``1``,
        ``yes``, ``on``; ``False`` for ``false``, ``0``, ``no``, ``off``
        (case-insensitive, surrounding blanks ignored).

    Raises:
        ApiError: 400 ``invalid-flag`` for any other value.
    """
    if value is None:
        return None
    v = value.strip().lower()
    if v in TRUE_VALUES:
        return True
    if v in FALSE_VALUES:
        return False
    raise ApiError(
        400, "invalid-flag",
        f"query flag {name}={value!r} is not a boolean: use it bare (?{name}) or give true/false, 1/0 or yes/no",
    )


_FLAG_DOC = "Boolean flag: bare or empty means true; also true/false, 1/0, yes/no, on/off (any case)."


async def features_flag(features: Annotated[str | None, Query(description=_FLAG_DOC)] = None) -> bool | None:
    """The ``features`` query flag of ``POST /event`` / ``/batch``, parsed by :func:`parse_flag`.

    Raises:
        ApiError: 400 ``invalid-flag``.
    """
    return parse_flag("features", features)


async def exports_flag(exports: Annotated[str | None, Query(description=_FLAG_DOC)] = None) -> bool | None:
    """The ``exports`` query flag of ``POST /event`` / ``/batch``, parsed by :func:`parse_flag`.

    Raises:
        ApiError: 400 ``invalid-flag``.
    """
    return parse_flag("exports", exports)


async def dry_run_flag(dry_run: Annotated[str | None, Query(description=(
        "Read-only mode: answer the values this event would get now, and store nothing (no state, no _id marker). "
        + _FLAG_DOC))] = None) -> bool | None:
    """The ``dry_run`` query flag of ``POST /event`` / ``/batch`` (the read-only mode), parsed by :func:`parse_flag`.

    Raises:
        ApiError: 400 ``invalid-flag``.
    """
    return parse_flag("dry_run", dry_run)


async def explain_flag(explain: Annotated[str | None, Query(description=(
        "Add \"explain\": per aggregate feature, its entity key, the window it counted (from, to, resolution_s) "
        "and the writes counted (null where its state keeps no count). " + _FLAG_DOC))] = None) -> bool | None:
    """The ``explain`` query flag of ``POST /event`` / ``/batch``, parsed by :func:`parse_flag`.

    Raises:
        ApiError: 400 ``invalid-flag``.
    """
    return parse_flag("explain", explain)


EvaluatorDep = Annotated[Evaluator, Depends(get_evaluator)]
StoreDep = Annotated[Store, Depends(get_store)]
ApiKey = Depends(check_api_key)
FeaturesFlag = Annotated[bool | None, Depends(features_flag)]
ExportsFlag = Annotated[bool | None, Depends(exports_flag)]
DryRunFlag = Annotated[bool | None, Depends(dry_run_flag)]
ExplainFlag = Annotated[bool | None, Depends(explain_flag)]
