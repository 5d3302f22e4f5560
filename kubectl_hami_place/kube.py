"""The CLI's Kubernetes access: kubeconfig handling and raw-JSON requests.

Objects stay plain JSON dicts (what the domain model reads): the official client's model
(de)serialisation costs more than the request for large lists and is never needed here. The
client is imported lazily, so ``--help`` and completion never pay for it.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from hami_place_core import kube_errors
from kubectl_hami_place.errors import UserError

PAGE_SIZE = 500


@dataclass
class Kube:
    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    request_timeout: float | None = None
    _api: Any = field(default=None, init=False, repr=False)
    _default_ns: str = field(default="default", init=False, repr=False)
    _fast: Any = field(default=None, init=False, repr=False)
    _pool: Any = field(default=None, init=False, repr=False)
    _resolved: bool = field(default=False, init=False, repr=False)

    def _resolve(self) -> None:
        """Pick the transport once: the fast path for common kubeconfigs, else the official client."""
        if self._resolved:
            return
        self._resolved = True
        from kubectl_hami_place import kubeconfig

        try:
            conn = kubeconfig.load(self.kubeconfig, self.context)
        except (OSError, ValueError, ssl.SSLError) as e:
            where = self.kubeconfig or "$KUBECONFIG or ~/.kube/config"
            raise UserError(f"cannot load kubeconfig from {where}: {e}") from e
        if conn is None:
            self.api()
            return
        import urllib3

        ctx = conn.ssl_context
        self._fast = conn
        self._default_ns = conn.namespace
        self._pool = urllib3.PoolManager(
            num_pools=2,
            ssl_context=ctx,
            cert_reqs=ctx.verify_mode if ctx is not None else None,
            assert_hostname=None if ctx is None or ctx.check_hostname else False,
            retries=False,
        )

    def _timeout(self, read: float | None) -> Any:
        import urllib3

        return urllib3.Timeout(connect=self.request_timeout or 30.0, read=read)

    def _url(self, path: str, query: dict[str, Any] | None) -> str:
        from urllib.parse import urlencode

        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        return str(self._fast.server) + path + (f"?{urlencode(params)}" if params else "")

    def api(self) -> Any:
        if self._api is not None:
            return self._api
        from kubernetes import config
        from kubernetes.config.config_exception import ConfigException

        try:
            self._api = config.new_client_from_config(config_file=self.kubeconfig, context=self.context)
            _, active = config.list_kube_config_contexts(config_file=self.kubeconfig)
            if self.context:
                contexts, _ = config.list_kube_config_contexts(config_file=self.kubeconfig)
                active = next((c for c in contexts if c["name"] == self.context), active)
            self._default_ns = (active or {}).get("context", {}).get("namespace") or "default"
        except (ConfigException, OSError) as e:
            try:  # inside a pod, as kubectl does
                config.load_incluster_config()
                from kubernetes import client

                self._api = client.ApiClient()
            except ConfigException:
                where = self.kubeconfig or "$KUBECONFIG or ~/.kube/config"
                raise UserError(f"cannot load kubeconfig from {where}: {e}") from e
        return self._api

    @property
    def server(self) -> str:
        self._resolve()
        host: Any = self._fast.server if self._fast is not None else self.api().configuration.host
        return str(host)

    def effective_namespace(self) -> str:
        self._resolve()
        return self.namespace or self._default_ns

    def request(
        self,
        method: str,
        path: str,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        self._resolve()
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        if self._fast is not None:
            try:
                resp = self._pool.request(
                    method,
                    self._url(path, query),
                    body=None if body is None else json.dumps(body).encode(),
                    headers={**headers, **self._fast.headers},
                    timeout=self._timeout(self.request_timeout),
                )
            except Exception as e:  # urllib3/TLS/socket errors all mean "unreachable"
                raise kube_errors.wrap(e, self.server) from e
            if not 200 <= resp.status < 300:
                raise kube_errors.from_status(resp.status, resp.data)
            return json.loads(resp.data) if resp.data else None
        api = self.api()
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        try:
            _, url, headers, serialized, _ = api.param_serialize(
                method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
            )
            resp = api.call_api(method, url, headers, serialized, _request_timeout=self.request_timeout)
            resp.read()
        except Exception as e:  # urllib3/TLS/socket errors all mean "unreachable"
            raise kube_errors.wrap(e, self.server) from e
        if not 200 <= resp.status < 300:
            raise kube_errors.from_status(resp.status, resp.data)
        return json.loads(resp.data) if resp.data else None

    def stream(
        self, path: str, query: dict[str, Any] | None = None, read_timeout: float | None = None
    ) -> Iterator[bytes]:
        """The lines of a streaming GET (a watch, or Server-Sent Events), as they arrive.

        ``read_timeout`` bounds the silence between two chunks (servers send keep-alives), not
        the whole stream; a silent stream raises Unreachable.
        """
        self._resolve()
        if self._fast is not None:
            yield from self._fast_stream(path, query, read_timeout)
            return
        api = self.api()
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        connect = self.request_timeout or 10.0
        try:
            _, url, headers, _, _ = api.param_serialize(
                "GET", path, query_params=params, header_params={"Accept": "*/*"}, auth_settings=["BearerToken"]
            )
            resp = api.call_api("GET", url, headers, None, _request_timeout=(connect, read_timeout))
        except Exception as e:
            raise kube_errors.wrap(e, self.server) from e
        if not 200 <= resp.status < 300:
            raise kube_errors.from_status(resp.status, resp.read())
        yield from self._lines(resp.response)

    def _fast_stream(self, path: str, query: dict[str, Any] | None, read_timeout: float | None) -> Iterator[bytes]:
        try:
            raw = self._pool.request(
                "GET",
                self._url(path, query),
                headers={"Accept": "*/*", **self._fast.headers},
                timeout=self._timeout(read_timeout),
                preload_content=False,
            )
        except Exception as e:
            raise kube_errors.wrap(e, self.server) from e
        if not 200 <= raw.status < 300:
            data = raw.read()
            raw.release_conn()
            raise kube_errors.from_status(raw.status, data)
        yield from self._lines(raw)

    def _lines(self, raw: Any) -> Iterator[bytes]:
        pending = b""
        try:
            for chunk in raw.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from lines
            if pending:
                yield pending
        except Exception as e:  # a read timeout or a reset mid-stream
            raise kube_errors.wrap(e, self.server) from e
        finally:
            raw.release_conn()

    def list_all(self, path: str, **query: Any) -> Iterator[dict[str, Any]]:
        """Every item of a list, page by page (limit/continue), so huge clusters stay bounded."""
        token = None
        while True:
            page = self.request("GET", path, {**query, "limit": PAGE_SIZE, "continue": token})
            yield from page.get("items") or ()
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
