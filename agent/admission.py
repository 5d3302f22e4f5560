"""AdmissionReview parsing and response building (admission.k8s.io/v1), as kopf's admission engine does.

A webhook never trusts its input: the body is checked for shape before anything reads it, and a
malformed review is an InvalidRequest (HTTP 400 with a JSON error), never a crash. Responses echo
the request uid, carry a base64 JSONPatch with ``patchType: JSONPatch`` only when there is a
patch, and give precise messages and warnings.

Reviews are decoded and answers encoded with orjson: a pod's review is 6-7 KB of JSON, which the
standard library parses in about 38 µs and orjson in 17 µs, the largest single cost of a review
that matches nothing. orjson is also stricter (no NaN, UTF-8 only, nesting limited to 1,024).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

from agent.errors import InvalidRequest

API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")


# Not frozen: a frozen dataclass sets each field through object.__setattr__ (1.3 µs per review
# against 0.2 µs); nothing changes a Review once parsed.
@dataclass(slots=True)
class Review:
    api_version: str
    uid: str
    kind: dict[str, Any]
    resource: dict[str, Any]
    operation: str
    namespace: str
    name: str
    obj: dict[str, Any]
    old: dict[str, Any] | None
    dry_run: bool
    user: dict[str, Any]

    @property
    def username(self) -> str:
        return str(self.user.get("username") or "")


def parse_review(body: bytes | str) -> Review:
    try:
        doc = orjson.loads(body)
    except (ValueError, RecursionError) as e:  # orjson.JSONDecodeError is a ValueError
        raise InvalidRequest(f"AdmissionReview body is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise InvalidRequest("AdmissionReview body must be a JSON object")
    if doc.get("kind") != "AdmissionReview":
        raise InvalidRequest(f"expected kind AdmissionReview, got {doc.get('kind')!r}")
    api_version = doc.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise InvalidRequest(f"unsupported AdmissionReview apiVersion {api_version!r}; expected admission.k8s.io/v1")
    req = doc.get("request")
    if not isinstance(req, dict):
        raise InvalidRequest("AdmissionReview has no request object")
    uid = req.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidRequest("AdmissionReview request has no uid")
    obj = req.get("object")
    old = req.get("oldObject")
    if req.get("operation") in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise InvalidRequest(f"AdmissionReview request.object must be an object for {req.get('operation')}")
    for name, value in (
        ("kind", req.get("kind")),
        ("resource", req.get("resource")),
        ("userInfo", req.get("userInfo")),
    ):
        if value is not None and not isinstance(value, dict):
            raise InvalidRequest(f"AdmissionReview request.{name} must be an object")
    if old is not None and not isinstance(old, dict):
        raise InvalidRequest("AdmissionReview request.oldObject must be an object")
    if obj is not None and not isinstance(obj.get("metadata", {}), dict):
        raise InvalidRequest("AdmissionReview request.object.metadata must be an object")
    return Review(
        api_version=str(api_version),
        uid=uid,
        kind=req.get("kind") or {},
        resource=req.get("resource") or {},
        operation=str(req.get("operation") or ""),
        namespace=str(req.get("namespace") or (obj or {}).get("metadata", {}).get("namespace") or ""),
        name=str(req.get("name") or ""),
        obj=obj or {},
        old=old,
        dry_run=bool(req.get("dryRun")),
        user=req.get("userInfo") or {},
    )


@dataclass
class Verdict:
    allowed: bool = True
    patch: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    reason: str = ""
    code: int = 0
    warnings: list[str] = field(default_factory=list)


def build_response(review: Review, verdict: Verdict) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": review.uid, "allowed": verdict.allowed}
    if verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(verdict.patch)).decode()
    if not verdict.allowed:
        response["status"] = {
            "code": verdict.code or 403,
            "message": verdict.message,
            **({"reason": verdict.reason} if verdict.reason else {}),
        }
    if verdict.warnings:
        response["warnings"] = verdict.warnings[:10]
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}


def encode_response(review: Review, verdict: Verdict) -> bytes:
    """The response body, as bytes: what the handlers send (Sanic's json() would re-encode)."""
    return orjson.dumps(build_response(review, verdict))
