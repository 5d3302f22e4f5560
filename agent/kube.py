"""The agent's asynchronous Kubernetes client: raw JSON over one aiohttp session.

Credentials come from the in-cluster service account, or from a kubeconfig when the agent runs
as a local process (tests, development). Errors are the typed ones of
:mod:`hami_place_core.kube_errors`, so handlers catch ``Conflict`` or ``NotFound``, never numbers.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from hami_place_core import kube_errors

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass
class Credentials:
    host: str
    ssl_context: ssl.SSLContext
    token: str | None = None
    token_file: str | None = None


def load_credentials(kubeconfig: str | None, token_file: str | None = None) -> Credentials:
    """From a kubeconfig if one is given (or $KUBECONFIG), else the in-cluster service account."""
    from kubernetes import client, config

    cfg = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    else:
        config.load_incluster_config(client_configuration=cfg)
        token_file = token_file or str(SA_DIR / "token")
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert else ssl.create_default_context()
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file and cfg.key_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    bearer = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
    token = bearer.split(" ", 1)[1] if bearer and bearer.startswith("Bearer ") else bearer
    if token_file:
        token = None  # read fresh from the file: projected tokens rotate
    return Credentials(host=cfg.host.rstrip("/"), ssl_context=ctx, token=token, token_file=token_file)


class AsyncKube:
    def __init__(self, creds: Credentials, timeout: float = 30.0) -> None:
        self.creds = creds
        self.timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._token_cache: tuple[float, str] | None = None

    def _session_get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self.creds.ssl_context, limit=64)
            self._session = aiohttp.ClientSession(connector=connector, json_serialize=json.dumps)
        return self._session

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.creds.token
        if self.creds.token_file:
            now = time.monotonic()
            if not self._token_cache or now - self._token_cache[0] > 60:
                self._token_cache = (now, Path(self.creds.token_file).read_text().strip())
            token = self._token_cache[1]
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        data = json.dumps(body) if body is not None else None
        try:
            async with self._session_get().request(
                method,
                self.creds.host + path,
                params=params,
                data=data,
                headers=self._headers(content_type if body is not None else None),
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            ) as resp:
                raw = await resp.read()
                if not 200 <= resp.status < 300:
                    raise kube_errors.from_status(resp.status, raw)
                return json.loads(raw) if raw else None
        except kube_errors.KubeError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise kube_errors.wrap(e, self.creds.host) from e

    async def list_all(self, path: str, **query: Any) -> tuple[list[dict[str, Any]], str]:
        """All items (paginated) and the list's resourceVersion, to watch from."""
        items: list[dict[str, Any]] = []
        token = None
        while True:
            page = await self.request("GET", path, {**query, "limit": 500, "continue": token})
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
            async with self._session_get().get(
                self.creds.host + path,
                params=params,
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=timeout_seconds + 30),
            ) as resp:
                if resp.status != 200:
                    raise kube_errors.from_status(resp.status, await resp.read())
                buf = b""
                async for chunk in resp.content.iter_any():
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            obj = event.get("object") or {}
                            raise kube_errors.from_status(int(obj.get("code") or 500), json.dumps(obj))
                        yield event
        except kube_errors.KubeError:
            raise
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as e:
            raise kube_errors.wrap(e, self.creds.host) from e
