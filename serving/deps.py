"""FastAPI dependencies: the evaluator, the store and the API-key check."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from serving.errors import ApiError
from serving.evaluate import Evaluator
from serving.store import Store


def get_evaluator(request: Request) -> Evaluator:
    """Return the app's :class:`Evaluator` (built in the lifespan)."""
    return request.app.state.evaluator


def get_store(request: Request) -> Store:
    """Return the app's :class:`Store`."""
    return request.app.state.store


def check_api_key(request: Request, x_api_key: Annotated[str | None, Header()] = None) -> None:
    """Require a valid ``x-api-key`` header when ``SCOWL_API_KEYS`` is set.

    Raises:
        ApiError: 401 ``unauthorized``.
    """
    keys = request.app.state.api_keys
    if keys and x_api_key not in keys:
        raise ApiError(401, "unauthorized", "missing or wrong x-api-key header")


EvaluatorDep = Annotated[Evaluator, Depends(get_evaluator)]
StoreDep = Annotated[Store, Depends(get_store)]
ApiKey = Depends(check_api_key)
