"""The one credentials loader: a kubeconfig, or the pod's service account, to :class:`Credentials`.

It follows kubectl where kubectl and the official Python client differ (the first file of a
KUBECONFIG list that sets current-context wins; relative paths resolve against the file that
named them) and is diff-tested against ``kubernetes.config`` on a corpus of kubeconfig shapes
(tests/unit/test_kube_config.py). What it reads:

- clusters: server, certificate-authority(-data), insecure-skip-tls-verify, tls-server-name,
  proxy-url;
- users, in the official client's order: auth-provider (oidc id-token, gcp and azure
  access-token from the config, gcp cmd-path), token / tokenFile, exec plugins (v1, v1beta1),
  username/password; client-certificate(-data) and client-key(-data) alongside any of them;
  impersonation (as, as-groups, as-uid, as-user-extra) as kubectl sends it;
- in a pod: KUBERNETES_SERVICE_HOST/PORT, the token (re-read: it rotates), ca.crt, namespace.

Proxy variables in the environment (HTTPS_PROXY, ...) are not read: neither transport did before.
Errors are typed: :class:`ConfigError` for a kubeconfig that cannot give a connection,
:class:`CredentialError` for credentials that cannot be obtained.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import ssl
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_place_core.kube.auth import Auth, ExecAuth, StaticAuth, TokenFileAuth, basic, jwt_expiry
from hami_place_core.kube.errors import ConfigError, CredentialError

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = "~/.kube/config"


@dataclass
class Credentials:
    server: str  # scheme://host[:port], no trailing slash
    namespace: str = "default"
    ca_pem: bytes | None = None  # None: the system's trust store
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    client_cert: tuple[bytes, bytes] | None = None  # PEM certificate and key
    auth: Auth = field(default_factory=Auth)
    headers: list[tuple[str, str]] = field(default_factory=list)  # impersonation; a name may repeat
    source: str = ""  # where these came from, for messages

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context for the server (None for http). Built again when ``auth.generation`` moves."""
        if not self.server.startswith("https://"):
            return None
        try:
            # no CA given: the system's trust store, which create_default_context loads itself
            ctx = ssl.create_default_context(cadata=self.ca_pem.decode() if self.ca_pem else None)
            if self.insecure:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            pair = self.auth.client_cert() or self.client_cert
            if pair is not None:
                _load_cert_chain(ctx, *pair)
        except (ssl.SSLError, ValueError) as e:
            raise ConfigError(f"bad TLS material in {self.source or 'the kubeconfig'}: {e}") from e
        return ctx

    def authorization(self) -> str | None:
        return self.auth.authorization()

    def request_headers(self) -> list[tuple[str, str]]:
        """Impersonation plus the current Authorization header, as pairs: Impersonate-Group repeats."""
        header = self.auth.authorization()
        return [*self.headers, *([("Authorization", header)] if header else [])]


def _load_cert_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    # ssl loads a chain only from files: write them to a private directory for the moment it takes
    with tempfile.TemporaryDirectory() as tmp:
        c, k = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        c.write_bytes(cert)
        k.touch(0o600)
        k.write_bytes(key)
        ctx.load_cert_chain(str(c), str(k))


# ---- kubeconfig --------------------------------------------------------------------------------------
@dataclass
class _Merged:
    entries: dict[str, dict[str, tuple[dict[str, Any], Path]]]  # kind -> name -> (entry, its file's dir)
    current_context: str | None
    files: list[Path]


def kubeconfig_paths(kubeconfig: str | None) -> list[Path]:
    raw = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    return [Path(os.path.expanduser(p)) for p in raw.split(os.pathsep) if p]


def _read(path: Path) -> dict[str, Any]:
    import yaml  # only when there is a file to read: the CLI's start-up does not pay for it

    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path} is not valid YAML: {what}{f' (line {mark.line + 1})' if mark else ''}") from e
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path} is not a kubeconfig (expected a YAML mapping, got {type(doc).__name__})")
    return doc


def _merge(paths: list[Path]) -> _Merged:
    """KUBECONFIG's merge rule (kubectl's): the first file that names an entry, or sets
    current-context, wins. A name twice in one file is an error, as in kubectl."""
    merged = _Merged({"clusters": {}, "users": {}, "contexts": {}}, None, [])
    for path in paths:
        if not path.is_file():
            continue
        doc = _read(path)
        merged.files.append(path)
        merged.current_context = merged.current_context or doc.get("current-context") or None
        for kind, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            items = doc.get(kind) or []
            if not isinstance(items, list):
                raise ConfigError(f"{path}: {kind} must be a list")
            seen: set[str] = set()
            for item in items:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise ConfigError(f"{path}: every entry of {kind} needs a name")
                name = item["name"]
                if name in seen:
                    raise ConfigError(f"{path}: {kind} names {name!r} twice")
                seen.add(name)
                body = item.get(key) or {}
                if not isinstance(body, dict):
                    raise ConfigError(f"{path}: {kind} entry {name!r} has no {key} mapping")
                merged.entries[kind].setdefault(name, (body, Path(os.path.abspath(path.parent))))
    return merged


def load(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Credentials for this kubeconfig (a path or an os.pathsep list; default $KUBECONFIG, then
    ~/.kube/config) and context (default current-context). With no kubeconfig file at all and no
    explicit path, inside a pod, the service account is used, as kubectl does."""
    merged = _merge(kubeconfig_paths(kubeconfig))
    if not merged.entries["contexts"] and not kubeconfig and os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    if not merged.files:
        where = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
        raise ConfigError(f"no kubeconfig file at {where}")
    name = context or merged.current_context
    cluster_name, (cluster, cbase), (user, ubase) = _context(merged, name)
    ctx = merged.entries["contexts"][str(name)][0]
    server = str(cluster.get("server") or "").rstrip("/")
    if not server:
        raise ConfigError(f"cluster {cluster_name!r} has no server")
    creds = Credentials(
        server=server,
        namespace=str(ctx.get("namespace") or "default"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy_url=cluster.get("proxy-url") or None,
        source=f"context {name!r} of {', '.join(map(str, merged.files))}",
    )
    if server.startswith("https://"):
        creds.ca_pem = _file_or_data(cluster, "certificate-authority", cbase, f"cluster {cluster_name!r}")
        cert = _file_or_data(user, "client-certificate", ubase, f"user {ctx.get('user')!r}")
        key = _file_or_data(user, "client-key", ubase, f"user {ctx.get('user')!r}")
        if cert and key:
            creds.client_cert = (cert, key)
    creds.auth = _user_auth(user, ubase, _exec_cluster_info(cluster, creds))
    creds.headers = _impersonation(user)
    return creds


def _context(merged: _Merged, name: str | None) -> tuple[str, tuple[dict[str, Any], Path], tuple[dict[str, Any], Path]]:
    """The context's cluster name, its cluster and its user (each with the directory of its file)."""
    if not name:
        raise ConfigError("no context chosen: the kubeconfig sets no current-context and --context was not given")
    if name not in merged.entries["contexts"]:
        raise ConfigError(f"context {name!r} is not in the kubeconfig")
    ctx, _ = merged.entries["contexts"][name]
    cluster_name = ctx.get("cluster")
    if not cluster_name:
        raise ConfigError(f"context {name!r} names no cluster")
    if cluster_name not in merged.entries["clusters"]:
        raise ConfigError(f"context {name!r} names cluster {cluster_name!r}, which is not in the kubeconfig")
    cluster = merged.entries["clusters"][cluster_name]
    # a user the kubeconfig does not define means no credentials, as in the official client
    user = merged.entries["users"].get(ctx.get("user") or "", ({}, cluster[1]))
    return str(cluster_name), cluster, user


def _file_or_data(entry: dict[str, Any], key: str, base: Path, owner: str) -> bytes | None:
    """``key-data`` (base64) wins over ``key`` (a path, relative to the file that named it)."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError) as e:
            raise ConfigError(f"{key}-data of {owner} is not valid base64") from e
    if entry.get(key):
        path = _resolve(base, str(entry[key]))
        try:
            return path.read_bytes()
        except OSError as e:
            raise ConfigError(f"cannot read {key} of {owner}: {path}: {e.strerror or e}") from e
    return None


def _resolve(base: Path, value: str) -> Path:
    p = Path(os.path.expanduser(value))
    return p if p.is_absolute() else base / p


def _user_auth(user: dict[str, Any], base: Path, cluster_info: dict[str, Any]) -> Auth:
    """The official client's order: auth-provider, token/tokenFile, exec, basic."""
    provider = _auth_provider(user.get("auth-provider"))
    if provider is not None:
        return provider
    if user.get("token"):
        return StaticAuth(f"Bearer {str(user['token']).strip()}")
    if "token" not in user and user.get("tokenFile"):
        file_auth = TokenFileAuth(str(_resolve(base, str(user["tokenFile"]))))
        try:
            file_auth.authorization()  # a missing file fails now, with the kubeconfig named
        except CredentialError as e:
            raise ConfigError(f"tokenFile: {e}") from e
        return file_auth
    if user.get("exec"):
        if not isinstance(user["exec"], dict):
            raise ConfigError("users[].user.exec must be a mapping")
        exec_auth = ExecAuth(user["exec"], base, cluster_info)
        exec_auth.authorization()  # run it now: a broken plugin is reported before any request
        return exec_auth
    if user.get("username") and user.get("password"):
        return StaticAuth(basic(str(user["username"]), str(user["password"])))
    return Auth()


def _auth_provider(provider: Any) -> Auth | None:
    """Legacy auth-provider entries, from what the config holds (nothing is refreshed over the
    network). None when the provider gives nothing, so the next source is tried."""
    if not isinstance(provider, dict) or not isinstance(provider.get("config"), dict):
        return None
    name, cfg = provider.get("name"), provider["config"]
    if name == "oidc":
        token = str(cfg.get("id-token") or "")
        try:
            exp = jwt_expiry(token)
        except (ValueError, UnicodeDecodeError):
            return None  # as the official client: not a JWT, not used
        if exp is not None and exp <= time.time():
            raise CredentialError(
                "the oidc id-token in the kubeconfig has expired; run a kubectl command to refresh it"
            )
        return StaticAuth(f"Bearer {token}")
    if name == "gcp":
        token, expiry = cfg.get("access-token"), cfg.get("expiry")
        if token and not (expiry and _past(str(expiry))):
            return StaticAuth(f"Bearer {token}")
        if cfg.get("cmd-path"):
            return StaticAuth(f"Bearer {_gcp_command_token(cfg)}")
        raise CredentialError(
            "the gcp auth-provider has no current access-token; use the gke-gcloud-auth-plugin exec plugin "
            "(gcloud container clusters get-credentials)"
        )
    if name == "azure" and cfg.get("access-token"):
        expires = cfg.get("expires-on")
        if expires and str(expires).isdigit() and int(str(expires)) <= time.time():
            raise CredentialError("the azure access-token in the kubeconfig has expired; use kubelogin")
        return StaticAuth(f"Bearer {cfg['access-token']}")
    return None


def _past(stamp: str) -> bool:
    from datetime import datetime

    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() <= time.time()
    except ValueError:
        return True


def _gcp_command_token(cfg: dict[str, Any]) -> str:
    """gcloud's config-helper as the legacy gcp provider ran it: cmd-path, cmd-args, token-key."""
    argv = [str(cfg["cmd-path"]), *str(cfg.get("cmd-args") or "").split()]
    if "cmd-args" not in cfg:
        argv = str(cfg["cmd-path"]).split()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        data = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        raise CredentialError(f"gcp auth-provider cmd-path {argv[0]!r} failed: {e}") from e
    if data is None:
        raise CredentialError(f"gcp auth-provider cmd-path {argv[0]!r} exited {done.returncode}")
    for path in (str(cfg.get("token-key") or "{.credential.access_token}"), "{.credential.access_token}"):
        node: Any = data
        for part in path.strip("{}").lstrip(".").split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, str) and node:
            return node
    raise CredentialError(f"gcp auth-provider cmd-path {argv[0]!r} printed no access token")


def _exec_cluster_info(cluster: dict[str, Any], creds: Credentials) -> dict[str, Any]:
    """spec.cluster of KUBERNETES_EXEC_INFO, for plugins with provideClusterInfo (kubectl's shape)."""
    info: dict[str, Any] = {"server": creds.server}
    for key, out in (
        ("certificate-authority-data", "certificate-authority-data"),
        ("insecure-skip-tls-verify", "insecure-skip-tls-verify"),
        ("tls-server-name", "tls-server-name"),
        ("proxy-url", "proxy-url"),
    ):
        if cluster.get(key):
            info[out] = cluster[key]
    for ext in cluster.get("extensions") or ():
        if isinstance(ext, dict) and ext.get("name") == "client.authentication.k8s.io/exec":
            info["config"] = ext.get("extension")
    return info


def _impersonation(user: dict[str, Any]) -> list[tuple[str, str]]:
    """kubectl's impersonation headers: one Impersonate-Group (or -Extra-) header per value."""
    from urllib.parse import quote

    headers: list[tuple[str, str]] = []
    if user.get("as"):
        headers.append(("Impersonate-User", str(user["as"])))
    if user.get("as-uid"):
        headers.append(("Impersonate-Uid", str(user["as-uid"])))
    headers += [("Impersonate-Group", str(g)) for g in user.get("as-groups") or ()]
    for key, values in (user.get("as-user-extra") or {}).items():
        headers += [(f"Impersonate-Extra-{quote(str(key), safe='')}", str(v)) for v in values or ()]
    return headers


# ---- in a pod ----------------------------------------------------------------------------------------
def in_cluster(
    token_file: str | None = None, sa_dir: Path = SA_DIR, environ: dict[str, str] | None = None
) -> Credentials:
    """The pod's service account. The token is re-read every minute and after a 401 (projected
    tokens rotate); ``token_file`` replaces the service-account token."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError("not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
    token = token_file or str(sa_dir / "token")
    if not Path(token).is_file():
        raise ConfigError(f"no service-account token at {token}")
    ca_file = sa_dir / "ca.crt"
    try:
        ca = ca_file.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read the service-account CA {ca_file}: {e.strerror or e}") from e
    if not ca.strip():
        raise ConfigError(f"the service-account CA {ca_file} is empty")
    ns_file = sa_dir / "namespace"
    auth = TokenFileAuth(token)
    try:
        auth.authorization()
    except CredentialError as e:
        raise ConfigError(str(e)) from e
    bracketed = f"[{host}]" if ":" in host or "%" in host else host
    return Credentials(
        server=f"https://{bracketed}:{port}",
        namespace=ns_file.read_text().strip() if ns_file.is_file() else "default",
        ca_pem=ca,
        auth=auth,
        source="the pod's service account",
    )
