"""OAUTHBEARER tokens from an OAuth 2 token endpoint (KIP-768's login side): the client-credentials
grant librdkafka runs with ``sasl.oauthbearer.method=oidc`` and Kafka's
``OAuthBearerLoginCallbackHandler`` runs with ``sasl.oauthbearer.token.endpoint.url``.

The request (:func:`token_request`, sans-IO) is an HTTP POST of the form
``grant_type=client_credentials[&scope=<scope>]`` with the client id and secret as HTTP basic
authentication, as both clients send it. The answer (:func:`parse_token_response`, sans-IO) is
JSON with an ``access_token``; the token's lifetime is its JWT ``exp`` claim (read without checking
the signature: the broker checks it), else the answer's ``expires_in``. A 4xx answer (a wrong
secret: 401) fails at once; a 5xx one, a connection error or a timeout is retried with exponential
backoff (Kafka's ``sasl.login.retry.backoff.ms`` / ``.max.ms``) a bounded number of times. Every
error names the URL, the HTTP status and the start of the body. The HTTP exchange runs in a worker
thread with a timeout, so a login waiting for the identity provider never blocks trio's loop.

A ``file:`` URL (broker side only, as Kafka allows) names a file holding the token itself.

:class:`RefreshingTokenProvider` keeps the token for every login and re-login of a client or
broker, and fetches a new one once 80% of its remaining lifetime has passed (librdkafka's rule,
``wts_refresh_after``; Kafka's ``sasl.login.refresh.window.factor`` default is the same 0.8).
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import trio

from .oauthbearer import BearerToken

log = logging.getLogger("odradek.security.oauthbearer")

#: librdkafka's OIDC request timeout (seconds)
DEFAULT_TIMEOUT_S = 20.0
#: requests per token fetch (the first and its retries)
DEFAULT_ATTEMPTS = 5
#: how much of a token's remaining lifetime passes before it is replaced (librdkafka, Kafka)
REFRESH_FACTOR = 0.8
#: how much of an error answer's body an error message quotes
BODY_EXCERPT = 200


class TokenEndpointError(Exception):
    """No token could be had from the endpoint; the message says what failed. ``retriable``:
    worth asking again (5xx, connection errors, timeouts)."""

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message)
        self.retriable = retriable


def check_token_endpoint_url(url: str, *, allow_file: bool) -> None:
    """ValueError unless ``url`` is an ``http:``/``https:`` URL with a host (or, with
    ``allow_file``, a ``file:`` one)."""
    parsed = urllib.parse.urlparse(url)
    schemes = ("http", "https", "file") if allow_file else ("http", "https")
    if parsed.scheme.lower() not in schemes:
        raise ValueError(f"the token endpoint URL must be a {', '.join(s + ':' for s in schemes)} URL, not {url!r}")
    if parsed.scheme.lower() != "file" and not parsed.hostname:
        raise ValueError(f"the token endpoint URL {url!r} has no host")


def check_allowed_url(url: str, allowed: Sequence[str], key: str) -> None:
    """ValueError unless ``url`` is in ``allowed`` (Kafka's
    ``org.apache.kafka.sasl.oauthbearer.allowed.urls``; ``*`` allows every URL)."""
    if "*" in allowed or url in allowed:
        return
    raise ValueError(
        f"{url!r} is not allowed as an OAUTHBEARER endpoint: add it to {key!r} "
        f"(allowed: {', '.join(allowed) or 'none'})"
    )


@dataclass(frozen=True, slots=True)
class TokenEndpointSettings:
    """Where and how to ask for a token. ``extensions`` go with the token to the broker (KIP-342)."""

    url: str
    client_id: str
    client_secret: str
    scope: str = ""
    extensions: Mapping[str, str] = field(default_factory=dict)
    #: the JWT claim naming the principal (Kafka's sasl.oauthbearer.sub.claim.name)
    sub_claim: str = "sub"
    timeout_s: float = DEFAULT_TIMEOUT_S
    attempts: int = DEFAULT_ATTEMPTS
    retry_backoff_s: float = 0.1
    retry_backoff_max_s: float = 10.0

    def __repr__(self) -> str:  # never the secret
        return f"TokenEndpointSettings({self.url!r}, client_id={self.client_id!r}, scope={self.scope!r})"


def token_request(settings: TokenEndpointSettings) -> tuple[bytes, dict[str, str]]:
    """The client-credentials request's form body and headers."""
    form = {"grant_type": "client_credentials"}
    if settings.scope:
        form["scope"] = settings.scope
    credentials = base64.b64encode(f"{settings.client_id}:{settings.client_secret}".encode()).decode()
    headers = {
        "Authorization": f"Basic {credentials}",
        "Content-Type": "application/x-www-form-urlencoded",
        "Accept": "application/json",
    }
    return urllib.parse.urlencode(form).encode(), headers


def _excerpt(body: bytes) -> str:
    text = body[:BODY_EXCERPT].decode("utf-8", "replace").strip()
    return text + ("..." if len(body) > BODY_EXCERPT else "")


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWS-shaped token, unverified; None when it is not one (an opaque token)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError):
        return None
    return claims if isinstance(claims, dict) else None


def bearer_from_access_token(
    token: str, settings: TokenEndpointSettings, *, expires_in: Any = None, now_s: float, where: str
) -> BearerToken:
    """A BearerToken for ``token``: its lifetime from the JWT ``exp``, else ``expires_in``;
    TokenEndpointError when neither says when it expires."""
    claims = jwt_claims(token) or {}
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool):
        expires_at = float(exp)
    elif isinstance(expires_in, int | float) and not isinstance(expires_in, bool) and expires_in > 0:
        expires_at = now_s + float(expires_in)
    else:
        raise TokenEndpointError(f"the token from {where} has no exp claim and no expires_in: its lifetime is unknown")
    if expires_at <= now_s:
        raise TokenEndpointError(f"the token from {where} has already expired (exp {expires_at:.0f})")
    sub = claims.get(settings.sub_claim)
    principal = sub if isinstance(sub, str) else settings.client_id
    return BearerToken(token, expires_at, principal, dict(settings.extensions))


def parse_token_response(status: int, body: bytes, settings: TokenEndpointSettings, *, now_s: float) -> BearerToken:
    """The token of the endpoint's answer; TokenEndpointError naming the status and the body's
    start when there is none (retriable for 5xx)."""
    where = settings.url
    if status >= 400 or status < 200:
        raise TokenEndpointError(
            f"the token endpoint {where} answered HTTP {status}: {_excerpt(body) or '(empty body)'}",
            retriable=status >= 500 or status == 429,
        )
    try:
        answer = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise TokenEndpointError(
            f"the token endpoint {where} answered HTTP {status} with no JSON: {_excerpt(body)}"
        ) from None
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise TokenEndpointError(f"the token endpoint {where} answered with no access_token: {_excerpt(body)}")
    return bearer_from_access_token(token, settings, expires_in=answer.get("expires_in"), now_s=now_s, where=where)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    """POST ``body`` to ``url`` (blocking: run in a thread); the status and body of any HTTP
    answer, TokenEndpointError (retriable) when none came."""
    request = urllib.request.Request(url, data=body, headers=dict(headers), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return int(exc.code), bytes(exc.read() or b"")
    except (OSError, ValueError) as exc:  # URLError, timeouts, refused connections
        reason = getattr(exc, "reason", exc)
        raise TokenEndpointError(f"cannot reach the token endpoint {url}: {reason}", retriable=True) from None


def read_token_file(url: str) -> bytes:
    """The token a ``file:`` URL names (blocking)."""
    path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise TokenEndpointError(f"cannot read the token file {url}: {exc.strerror}") from None


async def post_in_thread(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float) -> tuple[int, bytes]:
    """:func:`post` in a worker thread (abandoned if the caller is cancelled)."""
    return await trio.to_thread.run_sync(post, url, body, headers, timeout_s, abandon_on_cancel=True)


#: how a token request is sent: (url, body, headers, timeout_s) -> (status, body)
Post = Callable[[str, bytes, Mapping[str, str], float], Awaitable[tuple[int, bytes]]]


async def fetch_token(
    settings: TokenEndpointSettings, *, post: Post = post_in_thread, now: Callable[[], float] = time.time
) -> BearerToken:
    """A new token from the endpoint (see the module docstring for retries); TokenEndpointError."""
    if settings.url.lower().startswith("file:"):
        raw = await trio.to_thread.run_sync(read_token_file, settings.url)
        where = settings.url
        return bearer_from_access_token(raw.decode("utf-8", "replace").strip(), settings, now_s=now(), where=where)
    body, headers = token_request(settings)
    backoff = settings.retry_backoff_s
    attempt = 1
    while True:
        try:
            with trio.fail_after(settings.timeout_s + 1):
                status, answer = await post(settings.url, body, headers, settings.timeout_s)
            return parse_token_response(status, answer, settings, now_s=now())
        except trio.TooSlowError:
            error = TokenEndpointError(
                f"the token endpoint {settings.url} did not answer within {settings.timeout_s:g} s", retriable=True
            )
        except TokenEndpointError as exc:
            error = exc
        if not error.retriable or attempt >= settings.attempts:
            if attempt > 1:
                raise TokenEndpointError(f"{error} (after {attempt} attempts)") from None
            raise error
        log.warning("token request failed (%s); retrying in %.1f s", error, backoff)
        await trio.sleep(backoff)
        backoff = min(backoff * 2, settings.retry_backoff_max_s)
        attempt += 1


class RefreshingTokenProvider:
    """A token source for every login: the token ``fetch`` returned last, until
    :data:`REFRESH_FACTOR` of its remaining lifetime has passed, then a new one. A failed fetch
    raises (the login fails with its message) and is tried again at the next login. Logins at
    the same time wait for one fetch (it belongs to one client's or broker's trio loop)."""

    def __init__(self, fetch: Callable[[], Awaitable[BearerToken]], *, now: Callable[[], float] = time.time) -> None:
        self._fetch = fetch
        self._now = now
        self._token: BearerToken | None = None
        self._refresh_at = 0.0
        #: how many tokens were fetched
        self.fetches = 0
        self._lock = trio.Lock()

    async def __call__(self) -> BearerToken:
        async with self._lock:
            if self._token is None or self._now() >= self._refresh_at:
                token = await self._fetch()
                now = self._now()
                self._token, self._refresh_at = token, now + REFRESH_FACTOR * (token.expires_at_s - now)
                self.fetches += 1
            return self._token


def token_endpoint_provider(settings: TokenEndpointSettings) -> RefreshingTokenProvider:
    """A refreshing provider of ``settings``' tokens."""
    return RefreshingTokenProvider(lambda: fetch_token(settings))


__all__ = [
    "DEFAULT_ATTEMPTS",
    "DEFAULT_TIMEOUT_S",
    "REFRESH_FACTOR",
    "RefreshingTokenProvider",
    "TokenEndpointError",
    "TokenEndpointSettings",
    "bearer_from_access_token",
    "check_allowed_url",
    "check_token_endpoint_url",
    "fetch_token",
    "jwt_claims",
    "parse_token_response",
    "post",
    "post_in_thread",
    "token_endpoint_provider",
    "token_request",
]
