"""Who may see the explorer: ``SCOWL_UI_AUTH``, ``SCOWL_AUTH_ALL`` and the login cookie.

With API keys set (``SCOWL_API_KEYS``), the explorer asks for an accepted
key when ``SCOWL_UI_AUTH`` is true, and always under ``SCOWL_AUTH_ALL``
(which puts every path but ``/health`` and ``/ready`` behind the key). A key
is accepted from the ``x-api-key`` header (as on the API) or from the
``scowl_api_key`` cookie that the login form (``/ui/login``) sets:
``HttpOnly``, ``SameSite=Strict``, ``Path=/ui``, so only the explorer's own
pages ever send it, and never on a request started by another site. The
login page and the static files (the vendored scripts and the style sheet)
are open.

Under ``SCOWL_AUTH_ALL``, ``serving.fastpath.ScowlAPI`` answers 401 to any
request without the header before routing, which would leave a browser no
way in. :func:`route_ui_around_auth_all` gives the app a subclass whose
``__call__`` sends ``/ui`` paths straight to FastAPI, where the explorer's
own check (:func:`require_ui_key`, header or cookie, always on under
``auth_all``) applies; every other path goes through ``ScowlAPI`` unchanged.

Source: SPEC §4 (auth: header ``x-api-key``); OWASP "Session Management
Cheat Sheet" (``HttpOnly``, ``SameSite`` cookies).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse, Response

from serving.errors import ApiError

#: The cookie the login form sets (the API key itself; see the module docstring for its attributes).
COOKIE = "scowl_api_key"
#: Path prefix of the explorer.
UI_PATH = "/ui"


class LoginRequired(Exception):
    """A page of the explorer was asked for without an accepted key; answered by :func:`login_required_handler`.

    Args:
        next_url: where to come back to after logging in (a path under ``/ui``).
        htmx: the request came from htmx (answered with ``HX-Redirect``, not a 303).
    """

    def __init__(self, next_url: str, htmx: bool = False):
        super().__init__(next_url)
        self.next_url = next_url
        self.htmx = htmx


def auth_required(app: FastAPI) -> bool:
    """Whether the explorer asks for a key: keys are set and ``SCOWL_UI_AUTH`` or ``SCOWL_AUTH_ALL`` is on."""
    settings = app.state.settings
    return bool(app.state.api_keys) and bool(settings.ui_auth or settings.auth_all)


def presented_key(request: Request) -> str | None:
    """The key a request presents: the ``x-api-key`` header, else the ``scowl_api_key`` cookie, else ``None``."""
    return request.headers.get("x-api-key") or request.cookies.get(COOKIE)


def safe_next(url: str | None) -> str:
    """Return ``url`` if it is a path under ``/ui`` (no scheme, no host), else ``/ui`` (no open redirect).

    >>> safe_next("/ui/store?x=1"), safe_next("//evil.example/ui"), safe_next("https://x/ui"), safe_next(None)
    ('/ui/store?x=1', '/ui', '/ui', '/ui')
    """
    if not url or not url.startswith(UI_PATH) or url.startswith("//") or "\\" in url:
        return UI_PATH
    rest = url[len(UI_PATH):]
    if rest and rest[0] not in "/?#":
        return UI_PATH
    return url


async def require_ui_key(request: Request) -> None:
    """FastAPI dependency of every explorer route but the login page (module docstring).

    Raises:
        LoginRequired: a page (``GET``, not ``.json``) asked for without an
            accepted key: the browser is sent to the login form.
        ApiError: 401 ``unauthorized`` for a JSON endpoint or a form post.
    """
    app = request.app
    if not auth_required(app) or app.state.api_keys.accepts(presented_key(request)):
        return
    path = request.url.path
    htmx = request.headers.get("hx-request") == "true"
    if request.method == "GET" and not path.endswith(".json"):
        query = f"?{request.url.query}" if request.url.query else ""
        raise LoginRequired(path + query, htmx=htmx)
    if htmx:
        raise LoginRequired(UI_PATH, htmx=True)
    raise ApiError(401, "unauthorized", "the explorer needs an accepted API key: the x-api-key header, "
                                        "or log in at /ui/login")


async def login_required_handler(request: Request, exc: LoginRequired) -> Response:
    """Send the browser to ``/ui/login?next=...``: a 303, or for htmx a 401 ``unauthorized`` error body with ``HX-Redirect``."""
    from urllib.parse import quote

    target = f"{UI_PATH}/login?next={quote(safe_next(exc.next_url), safe='')}"
    if exc.htmx:  # htmx follows HX-Redirect; the body is the one error shape (SPEC §4)
        from serving.errors import error_response

        return error_response(401, "unauthorized", "missing or wrong x-api-key header or login cookie: "
                              f"log in at {UI_PATH}/login", headers={"HX-Redirect": target})
    return RedirectResponse(target, status_code=303)


def route_ui_around_auth_all(app: FastAPI) -> None:
    """Let ``/ui`` requests past ``ScowlAPI``'s ``SCOWL_AUTH_ALL`` header gate, to the explorer's own check.

    Adds ``/ui`` to the app's ``serving.fastpath.ScowlAPI.self_checked_prefixes``:
    requests for ``/ui`` and ``/ui/...`` then reach FastAPI's routing and
    :func:`require_ui_key`, which under ``auth_all`` always asks for a key,
    from the header or the cookie. Every other path keeps the header gate.

    Args:
        app: the app (a ``serving.fastpath.ScowlAPI``), modified in place.
    """
    prefixes = getattr(app, "self_checked_prefixes", ())
    if UI_PATH not in prefixes:
        app.self_checked_prefixes = (*prefixes, UI_PATH)
