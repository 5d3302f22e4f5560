"""Authentication and authorization of REST callers against their Kubernetes identity.

A caller presents a bearer token. The agent asks the API server who it is (TokenReview) and
whether that identity may read placements (SubjectAccessReview: list hamipodplacements, in the
namespace asked for or cluster-wide). No token or a rejected token is 401; an identity without
RBAC is 403. Decisions are cached for a few seconds per token so an SSE client or a busy CLI does
not cost two API calls per request.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass

from agent.errors import AccessDenied, Unauthenticated
from agent.kube import AsyncKube
from hami_place_core import placement as hp

CACHE_SECONDS = 10.0


@dataclass(frozen=True)
class Caller:
    username: str
    groups: tuple[str, ...]
    uid: str
    extra: dict[str, list[str]]


class Authorizer:
    def __init__(self, kube: AsyncKube) -> None:
        self.kube = kube
        self._identities: dict[str, tuple[float, Caller]] = {}
        self._decisions: dict[tuple[str, str, str, str, str], tuple[float, bool]] = {}

    async def authenticate(self, authorization: str | None) -> Caller:
        if not authorization or not authorization.startswith("Bearer ") or not authorization[7:].strip():
            raise Unauthenticated("a bearer token is required (Authorization: Bearer <token>)")
        token = authorization[7:].strip()
        digest = hashlib.sha256(token.encode()).hexdigest()
        hit = self._identities.get(digest)
        if hit and time.monotonic() - hit[0] < CACHE_SECONDS:
            return hit[1]
        review = await self.kube.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            raise Unauthenticated(
                "the API server did not accept this token" + (f": {status['error']}" if status.get("error") else "")
            )
        user = status.get("user") or {}
        caller = Caller(
            username=str(user.get("username") or ""),
            groups=tuple(user.get("groups") or ()),
            uid=str(user.get("uid") or ""),
            extra={k: list(v) for k, v in (user.get("extra") or {}).items()},
        )
        self._identities[digest] = (time.monotonic(), caller)
        return caller

    async def authorize(
        self, caller: Caller, verb: str, namespace: str = "", group: str = hp.GROUP, resource: str = hp.PLURAL
    ) -> None:
        """AccessDenied (403) unless the caller may `verb` `resource` (placements by default) there."""
        key = (caller.username + "|" + ",".join(caller.groups), verb, namespace, group, resource)
        hit = self._decisions.get(key)
        if hit and time.monotonic() - hit[0] < CACHE_SECONDS:
            allowed = hit[1]
        else:
            review = await self.kube.request(
                "POST",
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                body={
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview",
                    "spec": {
                        "user": caller.username,
                        "groups": list(caller.groups),
                        "uid": caller.uid,
                        "extra": caller.extra,
                        "resourceAttributes": {
                            "group": group,
                            "resource": resource,
                            "verb": verb,
                            "namespace": namespace,
                        },
                    },
                },
            )
            allowed = bool((review.get("status") or {}).get("allowed"))
            self._decisions[key] = (time.monotonic(), allowed)
        if not allowed:
            where = f"in namespace {namespace}" if namespace else "cluster-wide"
            what = f"{resource}.{group}" if group else resource
            raise AccessDenied(f"user {caller.username} may not {verb} {what} {where}")
