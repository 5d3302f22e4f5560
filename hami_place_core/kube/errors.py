"""Typed Kubernetes API errors: the one place an HTTP status becomes something callers catch.

Both transports (the CLI's urllib3 adapter, the agent's aiohttp one) and the watch decoder raise
these, so callers write ``except NotFound`` instead of comparing status codes. The Kubernetes ``Status``
message is kept (cut to a sane length: error bodies can be large and may echo object content),
and the original exception is chained as ``__cause__``. Network and TLS failures become
:class:`Unreachable`, with the server address, because that is what a user can act on.
"""

from __future__ import annotations

import json
from typing import Any

TEXT_MAX = 512


class KubeError(Exception):
    """Base class: an error reported by, or on the way to, the Kubernetes API."""

    status: int | None = None

    def __init__(self, message: str, status: int | None = None, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.body = body or {}

    @property
    def reason(self) -> str:
        return str(self.body.get("reason") or "")

    @property
    def causes(self) -> list[dict[str, Any]]:
        return list((self.body.get("details") or {}).get("causes") or [])


class Unreachable(KubeError):
    """The API server could not be reached (connection refused, TLS, DNS, timeout)."""


class ConfigError(KubeError):
    """The kubeconfig (or the pod's service account) cannot give a connection: a missing file or
    context, a malformed entry, unreadable certificate data."""


class CredentialError(KubeError):
    """The credentials could not be obtained right now: an exec plugin failed, a token file is
    gone. Raised when loading and again on a refresh, so it names its source itself."""


class BadRequest(KubeError):
    status = 400


class Unauthorized(KubeError):
    status = 401


class Forbidden(KubeError):
    status = 403


class NotFound(KubeError):
    status = 404


class Conflict(KubeError):
    """409: a resourceVersion precondition failed, or the object already exists."""

    status = 409


class Gone(KubeError):
    """410: a watch's resourceVersion is too old; the caller must list again."""

    status = 410


class Invalid(KubeError):
    """422: the object was rejected by validation (schema, CEL, or an admission webhook)."""

    status = 422


class TooManyRequests(KubeError):
    """429: for evictions, a PodDisruptionBudget forbids it right now."""

    status = 429


class ServerError(KubeError):
    status = 500


_BY_STATUS: dict[int, type[KubeError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def from_status(status: int, raw_body: str | bytes | None, fallback: str = "") -> KubeError:
    body: dict[str, Any] = {}
    if raw_body:
        try:
            parsed = json.loads(raw_body)
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            pass
    message = str(body.get("message") or fallback or (raw_body or b"")[:TEXT_MAX] or f"HTTP {status}")
    if isinstance(message, bytes):
        message = message.decode(errors="replace")
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else KubeError)
    return cls(message[:TEXT_MAX], status=status, body=body)


def wrap(exc: BaseException, server: str = "") -> KubeError:
    """Convert a transport's exception (urllib3, aiohttp, a socket or TLS error) into a typed KubeError."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and status > 0:
        err = from_status(status, getattr(exc, "body", None), getattr(exc, "reason", "") or "")
    else:
        where = f" at {server}" if server else ""
        detail = str(getattr(exc, "reason", None) or exc).strip()
        err = Unreachable(f"cannot reach the Kubernetes API server{where}: {detail[:TEXT_MAX]}")
    err.__cause__ = exc
    return err
