"""The agent's own HTTP errors (its webhooks and REST API): each carries its HTTP code, and every
error leaves the agent as JSON.

Errors from the Kubernetes API are another thing: the typed ones of
:mod:`hami_place_core.kube.errors`. The names differ on purpose (``AccessDenied``, ``Missing`` here;
``Forbidden``, ``NotFound`` there), so an ``except`` never catches the wrong one; the JSON ``error``
field keeps the HTTP names clients already read.
"""

from __future__ import annotations

from typing import Any


class AgentError(Exception):
    http_code = 500
    description = "internal error"
    name = ""  # the JSON `error` field; the class name when empty

    def __init__(self, message: str = "", **extra: Any) -> None:
        super().__init__(message or self.description)
        self.message = message or self.description
        self.extra = extra

    def body(self) -> dict[str, Any]:
        name = self.name or type(self).__name__
        return {"error": name, "code": self.http_code, "message": self.message, **self.extra}


class InvalidRequest(AgentError):
    """Malformed input: an AdmissionReview that is not one, a bad query parameter."""

    http_code = 400
    description = "invalid request"


class Unauthenticated(AgentError):
    """No bearer token, or the API server did not accept it (TokenReview)."""

    http_code = 401
    description = "authentication required"


class AccessDenied(AgentError):
    """The caller's Kubernetes identity may not do this (SubjectAccessReview)."""

    http_code = 403
    description = "forbidden"
    name = "Forbidden"


class Missing(AgentError):
    """No such placement in the cache, or a path this listener does not serve."""

    http_code = 404
    description = "not found"
    name = "NotFound"


class NotReady(AgentError):
    """The watch cache has not finished its first list yet."""

    http_code = 503
    description = "agent not ready: the watch cache is still syncing"
