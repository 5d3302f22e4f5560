"""The request pieces both transports share: the URL, the headers, and reading an answer.

Objects stay plain JSON dicts (what the domain model reads): no generated models, no
(de)serialisation beyond ``json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from hami_place_core.kube import errors

PAGE_SIZE = 500  # lists are read page by page (limit/continue), so huge clusters stay bounded


def url(server: str, path: str, query: Mapping[str, Any] | None = None) -> str:
    params = [(k, v) for k, v in (query or {}).items() if v is not None]
    return server + path + (f"?{urlencode(params)}" if params else "")


def headers(body: bool, content_type: str, accept: str = "application/json") -> dict[str, str]:
    """The request's own headers; the credentials' (Authorization, Impersonate-*) are added per send."""
    return {"Accept": accept, **({"Content-Type": content_type} if body else {})}


def encode(body: Any) -> bytes | None:
    return None if body is None else json.dumps(body).encode()


def answer(status: int, data: bytes | None) -> Any:
    """The JSON of a 2xx answer (None when empty); the typed error of any other."""
    if not 200 <= status < 300:
        raise errors.from_status(status, data)
    return json.loads(data) if data else None
