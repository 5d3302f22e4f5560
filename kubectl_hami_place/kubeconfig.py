"""A fast path for the common kubeconfigs: tokens, client certificates and exec plugins.

Importing the official client costs about 0.3 s (it loads ~800 generated model modules), which
would be most of a command's run time next to `kubectl get` (docs/benchmarks.md). For the
kubeconfig shapes below this module builds the TLS context and the Authorization header itself
and requests go through urllib3 (the official client's own transport). Anything else (legacy
auth-provider plugins, basic auth, proxy-url, tls-server-name) returns None, and the caller uses
the official client, so no kubeconfig kubectl accepts is refused.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubectl_hami_place.errors import UserError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
UNSUPPORTED_USER_KEYS = ("auth-provider", "username", "password", "as", "as-groups", "as-uid", "as-user-extra")
UNSUPPORTED_CLUSTER_KEYS = ("proxy-url", "tls-server-name", "disable-compression")


@dataclass
class Connection:
    server: str
    namespace: str
    ssl_context: ssl.SSLContext | None
    headers: dict[str, str] = field(default_factory=dict)


def _merged(paths: list[Path]) -> dict[str, Any]:
    """KUBECONFIG's merge rule: the first file that names an entry (or current-context) wins."""
    out: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": None, "base": {}}
    for path in paths:
        if not path.is_file():
            continue
        import yaml

        doc = yaml.safe_load(path.read_text()) or {}
        out["current-context"] = out["current-context"] or doc.get("current-context")
        for kind, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for item in doc.get(kind) or ():
                if item.get("name") not in out[kind]:
                    out[kind][item["name"]] = item.get(key) or {}
                    out["base"][(kind, item["name"])] = path.parent
    return out


def _file(base: Path, value: str) -> str:
    p = Path(os.path.expanduser(value))
    return str(p if p.is_absolute() else base / p)


def _data_file(data: str, tmpdir: Path, name: str) -> str:
    path = tmpdir / name
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return str(path)


def _exec_credential(spec: dict[str, Any], base: Path) -> dict[str, Any]:
    cmd = [spec["command"], *(spec.get("args") or [])]
    if "/" in cmd[0] and not os.path.isabs(cmd[0]):
        cmd[0] = _file(base, cmd[0])
    env = {**os.environ, **{e["name"]: e["value"] for e in spec.get("env") or ()}}
    api_version = spec.get("apiVersion") or "client.authentication.k8s.io/v1"
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    try:
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"kubeconfig exec plugin {cmd[0]!r} failed to run: {e}") from e
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise UserError(f"kubeconfig exec plugin {cmd[0]!r} exited {done.returncode}: {last}")
    try:
        return dict(json.loads(done.stdout).get("status") or {})
    except ValueError as e:
        raise UserError(f"kubeconfig exec plugin {cmd[0]!r} printed no ExecCredential JSON") from e


def load(kubeconfig: str | None, context: str | None) -> Connection | None:
    """The connection for this kubeconfig and context, or None to use the official client."""
    if os.environ.get("HAMI_PLACE_KUBE_CLIENT") == "official":
        return None
    raw = kubeconfig or os.environ.get("KUBECONFIG") or ""
    paths = [Path(os.path.expanduser(p)) for p in raw.split(os.pathsep) if p] or [Path.home() / ".kube" / "config"]
    cfg = _merged(paths)
    if not cfg["contexts"]:
        return _in_cluster() if not kubeconfig else None
    name = context or cfg["current-context"]
    if name not in cfg["contexts"]:
        return None  # the official client words this error as kubectl does
    ctx = cfg["contexts"][name]
    cluster, user = cfg["clusters"].get(ctx.get("cluster")), cfg["users"].get(ctx.get("user"), {})
    if cluster is None or any(k in user for k in UNSUPPORTED_USER_KEYS):
        return None
    if any(k in cluster for k in UNSUPPORTED_CLUSTER_KEYS):
        return None
    cbase = cfg["base"].get(("clusters", ctx.get("cluster")), Path.cwd())
    ubase = cfg["base"].get(("users", ctx.get("user")), Path.cwd())
    server = str(cluster.get("server") or "").rstrip("/")
    conn = Connection(server, ctx.get("namespace") or "default", None)
    if server.startswith("https://"):
        conn.ssl_context = _tls(cluster, user, cbase, ubase)
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = Path(_file(ubase, user["tokenFile"])).read_text().strip()
    if user.get("exec"):
        status = _exec_credential(user["exec"], ubase)
        token = status.get("token") or token
        if status.get("clientCertificateData") and conn.ssl_context is not None:
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = Path(tmp) / "c", Path(tmp) / "k"
                cert.write_text(status["clientCertificateData"])
                key.write_text(status["clientKeyData"])
                key.chmod(0o600)
                conn.ssl_context.load_cert_chain(str(cert), str(key))
    if token:
        conn.headers["Authorization"] = f"Bearer {token}"
    return conn


def _tls(cluster: dict[str, Any], user: dict[str, Any], cbase: Path, ubase: Path) -> ssl.SSLContext:
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        if cluster.get("insecure-skip-tls-verify"):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            ctx = ssl.create_default_context(cafile=_data_file(cluster["certificate-authority-data"], tmp, "ca"))
        elif cluster.get("certificate-authority"):
            ctx = ssl.create_default_context(cafile=_file(cbase, cluster["certificate-authority"]))
        else:
            ctx = ssl.create_default_context()
        cert = user.get("client-certificate-data") and _data_file(user["client-certificate-data"], tmp, "cert")
        cert = cert or (user.get("client-certificate") and _file(ubase, user["client-certificate"]))
        key = user.get("client-key-data") and _data_file(user["client-key-data"], tmp, "key")
        key = key or (user.get("client-key") and _file(ubase, user["client-key"]))
        if cert and key:
            ctx.load_cert_chain(cert, key)
    return ctx


def _in_cluster() -> Connection | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port or not (SA_DIR / "token").is_file():
        return None
    ns_file = SA_DIR / "namespace"
    conn = Connection(
        f"https://{host}:{port}" if ":" not in host else f"https://[{host}]:{port}",
        ns_file.read_text().strip() if ns_file.is_file() else "default",
        ssl.create_default_context(cafile=str(SA_DIR / "ca.crt")),
    )
    conn.headers["Authorization"] = f"Bearer {(SA_DIR / 'token').read_text().strip()}"
    return conn
