"""Agent errors: each carries its HTTP code, and every error leaves the agent as JSON."""

from __future__ import annotations

from typing import Any


class AgentError(Exception):
    http_code = 500
    description = "internal error"

    def __init__(self, message: str = "", **extra: Any) -> None:
        super().__init__(message or self.description)
        self.message = message or self.description
        self.extra = extra

    def body(self) -> dict[str, Any]:
        return {"error": type(self).__name__, "code": self.http_code, "message": self.message, **self.extra}


class InvalidRequest(AgentError):
    """Malformed input: an AdmissionReview that is not one, a bad query parameter."""

    http_code = 400
    description = "invalid request"


class Unauthenticated(AgentError):
    """No bearer token, or the API server did not accept it (TokenReview)."""

    http_code = 401
    description = "authentication required"


class Forbidden(AgentError):
    """The caller's Kubernetes identity may not do this (SubjectAccessReview)."""

    http_code = 403
    description = "forbidden"


class NotFound(AgentError):
    http_code = 404
    description = "not found"


class NotReady(AgentError):
    """The watch cache has not finished its first list yet."""

    http_code = 503
    description = "agent not ready: the watch cache is still syncing"
