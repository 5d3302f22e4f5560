"""The shared Kubernetes layer without a cluster: the error mapping, the watch decoder, credential
refresh, and both transports (the CLI's urllib3 adapter, the agent's aiohttp one) against a tiny
local HTTP server that answers like an API server."""

from __future__ import annotations

import asyncio
import json
import stat
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from agent.kube import AsyncKube, load_credentials
from hami_place_core.kube import auth, watch
from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.kube import Kube


# ---- errors -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (400, kube_errors.BadRequest),
        (401, kube_errors.Unauthorized),
        (403, kube_errors.Forbidden),
        (404, kube_errors.NotFound),
        (409, kube_errors.Conflict),
        (410, kube_errors.Gone),
        (422, kube_errors.Invalid),
        (429, kube_errors.TooManyRequests),
        (500, kube_errors.ServerError),
        (503, kube_errors.ServerError),
        (418, kube_errors.KubeError),
    ],
)
def test_status_maps_to_one_typed_error(status: int, cls: type[kube_errors.KubeError]) -> None:
    body = {"kind": "Status", "code": status, "reason": "SomeReason", "message": f"m{status}"}
    err = kube_errors.from_status(status, json.dumps(body).encode())
    assert type(err) is cls and err.status == status and err.message == f"m{status}" and err.reason == "SomeReason"


def test_non_json_bodies_are_cut_and_network_failures_are_unreachable() -> None:
    err = kube_errors.from_status(502, b"<html>" + b"x" * 5000)
    assert isinstance(err, kube_errors.ServerError) and len(err.message) == kube_errors.TEXT_MAX
    down = kube_errors.wrap(ConnectionRefusedError("refused"), "https://k8s:6443")
    assert isinstance(down, kube_errors.Unreachable) and "https://k8s:6443" in str(down)
    assert isinstance(down.__cause__, ConnectionRefusedError)


# ---- the watch decoder -----------------------------------------------------------------------------------
def _event(kind: str, name: str, rv: str) -> bytes:
    return json.dumps({"type": kind, "object": {"metadata": {"name": name, "resourceVersion": rv}}}).encode()


def test_lines_survive_any_chunking() -> None:
    stream = b"\n".join([_event("ADDED", "a", "1"), b"", _event("MODIFIED", "a", "2"), _event("DELETED", "a", "3")])
    for size in (1, 2, 7, 50, len(stream)):
        chunks = [stream[i : i + size] for i in range(0, len(stream), size)]
        got = [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in watch.events(chunks)]
        assert got == [("ADDED", "1"), ("MODIFIED", "2"), ("DELETED", "3")], size


def test_error_events_raise_typed_errors() -> None:
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}}
    with pytest.raises(kube_errors.Gone, match="too old"):
        list(watch.events([_event("ADDED", "a", "1") + b"\n", json.dumps(gone).encode() + b"\n"]))
    with pytest.raises(kube_errors.ServerError, match="watch failed"):
        watch.decode_event(json.dumps({"type": "ERROR", "object": {"code": 500}}))
    with pytest.raises(ValueError, match="not a watch event"):
        watch.decode_event(b"[1, 2]")
    assert watch.decode_event(b"  \r") is None


# ---- credentials that change ---------------------------------------------------------------------------
def _counting_plugin(tmp: Path, tokens: list[str], expires_in: float | None = None) -> tuple[str, Path]:
    """An exec plugin that hands out `tokens` one per run (the last one again and again)."""
    counter = tmp / "runs"
    counter.write_text("0")
    script = tmp / "plugin.py"
    stamp = ""
    if expires_in is not None:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + expires_in))
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, pathlib\n"
        f"c = pathlib.Path({str(counter)!r}); n = int(c.read_text()); c.write_text(str(n + 1))\n"
        f"tokens = {tokens!r}\n"
        "status = {'token': tokens[min(n, len(tokens) - 1)]}\n"
        f"if {stamp!r}: status['expirationTimestamp'] = {stamp!r}\n"
        "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', 'kind': 'ExecCredential',"
        " 'status': status}))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script), counter


def _exec_spec(command: str) -> dict[str, Any]:
    return {"apiVersion": "client.authentication.k8s.io/v1", "command": command, "interactiveMode": "Never"}


def test_exec_credentials_are_cached_until_they_expire(tmp_path: Path) -> None:
    command, runs = _counting_plugin(tmp_path, ["t1", "t2", "t3"], expires_in=3600)
    lasting = auth.ExecAuth(_exec_spec(command), tmp_path)
    assert [lasting.authorization() for _ in range(3)] == ["Bearer t1"] * 3 and runs.read_text() == "1"
    assert lasting.refresh() and lasting.authorization() == "Bearer t2" and runs.read_text() == "2"

    command, runs = _counting_plugin(tmp_path, ["e1", "e2"], expires_in=-10)  # already expired
    expired = auth.ExecAuth(_exec_spec(command), tmp_path)
    assert expired.authorization() == "Bearer e1" and expired.authorization() == "Bearer e2"
    assert runs.read_text() == "2"


def test_exec_plugin_errors_name_the_plugin(tmp_path: Path) -> None:
    with pytest.raises(kube_errors.CredentialError, match="apiVersion None is not one of"):
        auth.ExecAuth({"command": "x"}, tmp_path)
    broken = tmp_path / "broken.sh"
    broken.write_text("#!/bin/sh\necho 'no such account' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(kube_errors.CredentialError, match=r"exec plugin '.*broken.sh' exited 3: no such account"):
        auth.ExecAuth(_exec_spec(str(broken)), tmp_path).authorization()
    with pytest.raises(kube_errors.CredentialError, match="failed to run"):
        auth.ExecAuth(_exec_spec(str(tmp_path / "missing")), tmp_path).authorization()


def test_token_files_are_read_again(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("one\n")
    rotating = auth.TokenFileAuth(str(token), reread_seconds=0)
    assert rotating.authorization() == "Bearer one"
    token.write_text("two")
    assert rotating.authorization() == "Bearer two"
    cached = auth.TokenFileAuth(str(token))
    assert cached.authorization() == "Bearer two"
    token.write_text("three")
    assert cached.authorization() == "Bearer two"  # within the minute
    assert cached.refresh() and cached.authorization() == "Bearer three"  # after a 401


# ---- both transports against a fake API server -----------------------------------------------------------
class FakeAPI(BaseHTTPRequestHandler):
    good = "Bearer good"
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _json(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        FakeAPI.seen.append({"path": self.path, "groups": self.headers.get_all("Impersonate-Group") or []})
        if self.headers.get("Authorization") != self.good:
            self._json(401, {"kind": "Status", "code": 401, "reason": "Unauthorized", "message": "Unauthorized"})
        elif self.path.startswith("/api/v1/namespaces/missing"):
            self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": 'namespaces "missing"'})
        elif "watch=" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            stream = _event("ADDED", "a", "5") + b"\n" + _event("MODIFIED", "a", "6") + b"\n"
            gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
            stream += json.dumps(gone).encode() + b"\n"
            for i in range(0, len(stream), 17):  # chunks that end mid-line
                self.wfile.write(stream[i : i + 17])
                self.wfile.flush()
        else:
            self._json(200, {"kind": "NamespaceList", "metadata": {"resourceVersion": "4"}, "items": [{"n": 1}]})


@pytest.fixture
def fake_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    FakeAPI.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _kubeconfig(tmp: Path, server: str, user: dict[str, Any]) -> str:
    path = tmp / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ns1"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def test_sync_transport_refreshes_on_401_decodes_watches_and_types_errors(fake_api: str, tmp_path: Path) -> None:
    command, runs = _counting_plugin(tmp_path, ["stale", "good"])
    kube = Kube(_kubeconfig(tmp_path, fake_api, {"exec": _exec_spec(command), "as-groups": ["g1", "g2"]}))
    assert kube.effective_namespace() == "ns1" and kube.server == fake_api
    assert list(kube.list_all("/api/v1/namespaces")) == [{"n": 1}]
    assert runs.read_text() == "2"  # one 401, one refresh, one retry
    assert FakeAPI.seen[-1]["groups"] == ["g1", "g2"]  # one header per group
    with pytest.raises(kube_errors.NotFound, match="missing"):
        kube.request("GET", "/api/v1/namespaces/missing")
    got = []
    with pytest.raises(kube_errors.Gone, match="too old"):
        for event in kube.watch("/api/v1/namespaces", {"resourceVersion": "4"}, read_timeout=5):
            got.append(event["object"]["metadata"]["resourceVersion"])
    assert got == ["5", "6"]


def test_sync_transport_401_with_a_static_token_is_unauthorized(fake_api: str, tmp_path: Path) -> None:
    kube = Kube(_kubeconfig(tmp_path, fake_api, {"token": "wrong"}))
    with pytest.raises(kube_errors.Unauthorized):
        kube.request("GET", "/api/v1/namespaces")
    assert len(FakeAPI.seen) == 1  # a static token is not retried


def test_async_transport_refreshes_on_401_decodes_watches_and_types_errors(fake_api: str, tmp_path: Path) -> None:
    command, runs = _counting_plugin(tmp_path, ["stale", "good"])
    creds = load_credentials(_kubeconfig(tmp_path, fake_api, {"exec": _exec_spec(command), "as-groups": ["g1", "g2"]}))

    async def scenario() -> tuple[list[dict[str, Any]], str, list[str]]:
        kube = AsyncKube(creds, timeout=5)
        try:
            items, rv = await kube.list_all("/api/v1/namespaces")
            with pytest.raises(kube_errors.NotFound, match="missing"):
                await kube.request("GET", "/api/v1/namespaces/missing")
            got: list[str] = []
            with pytest.raises(kube_errors.Gone, match="too old"):
                async for event in kube.watch("/api/v1/namespaces", rv):
                    got.append(event["object"]["metadata"]["resourceVersion"])
            return items, rv, got
        finally:
            await kube.close()

    items, rv, got = asyncio.run(scenario())
    assert items == [{"n": 1}] and rv == "4" and got == ["5", "6"]
    assert runs.read_text() == "2"
    assert all(s["groups"] == ["g1", "g2"] for s in FakeAPI.seen)


def test_agent_token_file_replaces_the_kubeconfig_token(fake_api: str, tmp_path: Path) -> None:
    token = tmp_path / "sa-token"
    token.write_text("good")
    creds = load_credentials(_kubeconfig(tmp_path, fake_api, {"token": "wrong"}), str(token))

    async def scenario() -> Any:
        kube = AsyncKube(creds, timeout=5)
        try:
            return await kube.request("GET", "/api/v1/namespaces")
        finally:
            await kube.close()

    assert asyncio.run(scenario())["kind"] == "NamespaceList"


def test_in_cluster_without_a_pod_is_a_typed_error(monkeypatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(kube_errors.ConfigError, match="not in a pod"):
        load_credentials(None)


# ---- the CLI's watch loops over the decoder ------------------------------------------------------------
def _placement(rv: str, phase: str) -> dict[str, Any]:
    meta = {"namespace": "ml", "name": "p", "resourceVersion": rv}
    return {"metadata": meta, "spec": {"nodeName": "n1", "gpuDevices": ["gpu-0"]}, "status": {"phase": phase}}


class _GoneOnce:
    """A Kube whose first watch expires (410) after one event; the re-read and second watch go on."""

    def __init__(self) -> None:
        self.watches: list[str] = []
        self.reads = 0

    def request(self, method: str, path: str, query: Any = None) -> dict[str, Any]:
        self.reads += 1
        if query and query.get("limit") == 1:  # status -w's relist for a fresh resourceVersion
            return {"metadata": {"resourceVersion": "20"}, "items": []}
        return _placement("10" if self.reads == 1 else "20", "Pending")

    def watch(self, path: str, query: dict[str, Any], read_timeout: float | None = None) -> Iterator[dict[str, Any]]:
        self.watches.append(query["resourceVersion"])
        if len(self.watches) == 1:
            yield {"type": "MODIFIED", "object": _placement("11", "Pending")}
            raise kube_errors.Gone("too old resource version", status=410)
        yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "21"}}}
        yield {"type": "MODIFIED", "object": _placement("22", "Completed")}


def test_follow_reads_the_placement_again_after_gone() -> None:
    from kubectl_hami_place.ops.follow import _watch_views

    kube = _GoneOnce()
    phases = []
    for view in _watch_views(kube, "ml", "p", lambda: None):  # type: ignore[arg-type]
        phases.append(view.get("phase"))
        if view.get("phase") == "Completed":
            break
    assert phases == ["Pending", "Pending", "Pending", "Completed"]
    assert kube.watches == ["10", "20"]  # the second watch starts from the re-read object


def test_status_watch_lists_again_after_gone(capsys) -> None:
    from kubectl_hami_place.ops.status import _watch

    kube = _GoneOnce()
    _watch(kube, "/apis/x/ml/p", {}, [], "10", "json", False, True)
    # -w -o json: one placement object per line (as kubectl get -w -o json), not the agent's flat view
    printed = [json.loads(line)["status"]["phase"] for line in capsys.readouterr().out.splitlines()]
    assert printed == ["Pending", "Completed"] and kube.watches == ["10", "20"]
