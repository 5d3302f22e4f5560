"""The agent's asynchronous Kubernetes client: a thin adapter, raw JSON over one aiohttp session.

Credentials, errors and the watch decoder are the shared layer's (:mod:`hami_place_core.kube`):
the in-cluster service account, or a kubeconfig when the agent runs as a local process (tests,
development). Errors are the typed ones of :mod:`hami_place_core.kube.errors`, so handlers catch
``Conflict`` or ``NotFound``, never numbers. In a pod the token is a file read once a minute; an
exec plugin (a kubeconfig for a local run) runs synchronously, once per credential lifetime.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from hami_place_core.kube import config, watch, wire
from hami_place_core.kube import errors as kube_errors
from hami_place_core.kube.auth import TokenFileAuth
from hami_place_core.kube.config import Credentials

__all__ = ["AsyncKube", "Credentials", "load_credentials"]


def load_credentials(kubeconfig: str | None, token_file: str | None = None) -> Credentials:
    """From a kubeconfig if one is given, else the in-cluster service account. ``token_file``
    replaces the token either way (read fresh: projected tokens rotate)."""
    if not kubeconfig:
        return config.in_cluster(token_file=token_file)
    creds = config.load(kubeconfig)
    if token_file:
        creds.auth = TokenFileAuth(token_file)
    return creds


class AsyncKube:
    def __init__(self, creds: Credentials, timeout: float = 30.0) -> None:
        self.creds = creds
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []
        self._generation = -1

    def _session_get(self) -> aiohttp.ClientSession:
        # A new session when an exec plugin hands out a new client certificate (generation moves).
        if self._session is None or self._session.closed or self._generation != self.creds.auth.generation:
            if self._session is not None and not self._session.closed:
                self._retired.append(self._session)  # its watches in flight finish; closed with us
            ssl_ctx: Any = self.creds.ssl_context()  # may run an exec plugin, which may move generation
            self._generation = self.creds.auth.generation
            connector = aiohttp.TCPConnector(ssl=ssl_ctx if ssl_ctx is not None else False, limit=64)
            self._session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
        return self._session

    def _extra(self) -> dict[str, Any]:
        """The per-request options the credentials ask for: SNI name and proxy."""
        extra: dict[str, Any] = {}
        if self.creds.tls_server_name:
            extra["server_hostname"] = self.creds.tls_server_name
        if self.creds.proxy_url:
            extra["proxy"] = self.creds.proxy_url
        return extra

    async def close(self) -> None:
        for session in (*self._retired, self._session):
            if session is not None:
                await session.close()

    async def _open(
        self, method: str, path: str, params: dict[str, Any] | None, headers: dict[str, str], **kw: Any
    ) -> aiohttp.ClientResponse:
        """Send one request; after a 401 the credentials are refreshed and it is sent once more."""
        url = wire.url(self.creds.server, path, params)
        for attempt in (1, 2):
            resp = await self._session_get().request(
                method, url, headers=[*headers.items(), *self.creds.request_headers()], **self._extra(), **kw
            )
            if resp.status == 401 and attempt == 1 and self.creds.auth.refresh():
                resp.release()
                continue
            return resp
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns

    async def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        try:
            resp = await self._open(
                method,
                path,
                query,
                wire.headers(body is not None, content_type),
                data=wire.encode(body),
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            )
            async with resp:
                return wire.answer(resp.status, await resp.read())
        except kube_errors.KubeError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise kube_errors.wrap(e, self.creds.server) from e

    async def list_all(self, path: str, **query: Any) -> tuple[list[dict[str, Any]], str]:
        """All items (paginated) and the list's resourceVersion, to watch from."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = await self.request("GET", path, {**query, "limit": wire.PAGE_SIZE, "continue": token})
            items.extend(page.get("items") or ())
            meta = page.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 300
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events from `resource_version` until the server ends the stream. A 410 (or an
        ERROR event carrying 410) raises Gone: the caller must list again."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        try:
            resp = await self._open(
                "GET",
                path,
                params,
                {"Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=timeout_seconds + 30),
            )
            async with resp:
                if resp.status != 200:
                    raise kube_errors.from_status(resp.status, await resp.read())
                lines = watch.Lines()
                async for chunk in resp.content.iter_any():
                    for line in lines.feed(chunk):
                        event = watch.decode_event(line)
                        if event is not None:
                            yield event
                for line in lines.rest():
                    event = watch.decode_event(line)
                    if event is not None:
                        yield event
        except kube_errors.KubeError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            raise kube_errors.wrap(e, self.creds.server) from e
