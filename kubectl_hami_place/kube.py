"""The CLI's Kubernetes access: a thin synchronous adapter over urllib3.

Credentials, errors and the watch decoder are the shared layer's (:mod:`hami_place_core.kube`);
this module only moves bytes. urllib3 is what the official client uses underneath, without its
~800 generated model modules (importing those cost 0.22-0.31 s, most of a command's run time next
to `kubectl get`: docs/benchmarks.md). urllib3 is imported lazily, so ``--help`` and completion
never pay for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hami_place_core.kube import config, watch, wire
from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.errors import UserError

PAGE_SIZE = wire.PAGE_SIZE


@dataclass
class Kube:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    request_timeout: float | None = None
    _creds: config.Credentials | None = field(default=None, init=False, repr=False)
    _pool: Any = field(default=None, init=False, repr=False)
    _generation: int = field(default=-1, init=False, repr=False)

    def credentials(self) -> config.Credentials:
        if self._creds is None:
            try:
                self._creds = config.load(self.kubeconfig, self.context)
            except kube_errors.ConfigError as e:
                where = self.kubeconfig or "$KUBECONFIG or ~/.kube/config"
                raise UserError(f"cannot load kubeconfig from {where}: {e}") from e
        return self._creds

    def _pool_get(self) -> Any:
        """One connection pool, built again when an exec plugin hands out a new client certificate."""
        creds = self.credentials()
        if self._pool is not None and self._generation == creds.auth.generation:
            return self._pool
        import urllib3

        try:
            ctx = creds.ssl_context()
        except kube_errors.ConfigError as e:
            raise UserError(f"cannot load kubeconfig from {self.kubeconfig or creds.source}: {e}") from e
        self._generation = creds.auth.generation
        tls: dict[str, Any] = {}
        if ctx is not None:
            tls = {
                "ssl_context": ctx,
                "cert_reqs": ctx.verify_mode,
                "assert_hostname": None if ctx.check_hostname else False,
            }
            if creds.tls_server_name:
                tls["server_hostname"] = creds.tls_server_name
        if creds.proxy_url and creds.proxy_url.split("://")[0].lower().startswith("socks"):
            try:
                from urllib3.contrib.socks import SOCKSProxyManager
            except ImportError as e:  # PySocks is not installed
                raise UserError(f"proxy-url {creds.proxy_url} needs PySocks: {e}") from e
            self._pool = SOCKSProxyManager(creds.proxy_url, num_pools=2, retries=False, **tls)
        elif creds.proxy_url:
            self._pool = urllib3.ProxyManager(creds.proxy_url, num_pools=2, retries=False, **tls)
        else:
            self._pool = urllib3.PoolManager(num_pools=2, retries=False, **tls)
        return self._pool

    def _timeout(self, read: float | None) -> Any:
        import urllib3

        return urllib3.Timeout(connect=self.request_timeout or 30.0, read=read)

    @property
    def server(self) -> str:
        return self.credentials().server

    def effective_namespace(self) -> str:
        return self.namespace or self.credentials().namespace

    def _send(self, method: str, path: str, query: dict[str, Any] | None, **kw: Any) -> Any:
        """One request; after a 401 the credentials are refreshed and it is sent once more."""
        from urllib3 import HTTPHeaderDict

        creds = self.credentials()
        base = kw.pop("headers")
        for attempt in (1, 2):
            headers = HTTPHeaderDict(base)
            for name, value in creds.request_headers():  # Impersonate-Group may repeat
                headers.add(name, value)
            try:
                resp = self._pool_get().request(method, wire.url(creds.server, path, query), headers=headers, **kw)
            except kube_errors.KubeError:
                raise
            except Exception as e:  # urllib3/TLS/socket errors all mean "unreachable"
                raise kube_errors.wrap(e, creds.server) from e
            if resp.status == 401 and attempt == 1 and creds.auth.refresh():
                resp.drain_conn()
                continue
            return resp
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        resp = self._send(
            method,
            path,
            query,
            body=wire.encode(body),
            headers=wire.headers(body is not None, content_type),
            timeout=self._timeout(self.request_timeout),
        )
        return wire.answer(resp.status, resp.data)

    def stream(
        self, path: str, query: dict[str, Any] | None = None, read_timeout: float | None = None
    ) -> Iterator[bytes]:
        """The lines of a streaming GET (a watch, or Server-Sent Events), as they arrive.

        ``read_timeout`` bounds the silence between two chunks (servers send keep-alives), not
        the whole stream; a silent stream raises Unreachable.
        """
        raw = self._send(
            "GET",
            path,
            query,
            headers={"Accept": "*/*"},
            timeout=self._timeout(read_timeout),
            preload_content=False,
        )
        if not 200 <= raw.status < 300:
            data = raw.read()
            raw.release_conn()
            raise kube_errors.from_status(raw.status, data)
        try:
            yield from watch.lines(raw.stream(amt=None, decode_content=True))
        except Exception as e:  # a read timeout or a reset mid-stream
            raise kube_errors.wrap(e, self.server) from e
        finally:
            raw.release_conn()

    def watch(
        self, path: str, query: dict[str, Any] | None = None, read_timeout: float | None = None
    ) -> Iterator[dict[str, Any]]:
        """The events of a watch (``watch=true`` is added). An ERROR event raises its typed error:
        Gone (410) means list again."""
        for line in self.stream(path, {**(query or {}), "watch": "true"}, read_timeout):
            event = watch.decode_event(line)
            if event is not None:
                yield event

    def list_all(self, path: str, **query: Any) -> Iterator[dict[str, Any]]:
        """Every item of a list, page by page (limit/continue), so huge clusters stay bounded."""
        token = None
        while True:
            page = self.request("GET", path, {**query, "limit": PAGE_SIZE, "continue": token})
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
