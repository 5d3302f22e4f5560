"""The credentials loader (hami_place_core.kube.config) diff-tested against the official client.

Each kubeconfig shape is generated here and loaded twice: by ``kubernetes.config`` into a
``Configuration`` and by our loader into ``Credentials``. Host, TLS verification, CA, client
certificate and key (contents), the Authorization header, tls-server-name and proxy must agree.
Malformed shapes must fail in both; ours must raise a typed error that says what is wrong. Where we
follow kubectl instead of the official client, a test below says so and shows the difference.
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes import config as official_config
from kubernetes.config.incluster_config import InClusterConfigLoader

from hami_place_core.kube import config
from hami_place_core.kube.errors import ConfigError, CredentialError, KubeError

PROXY_VARS = [v for n in ("https", "http", "all", "no") for v in (f"{n}_proxy", f"{n.upper()}_PROXY")]


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch):
    # the official Configuration reads proxy variables from the environment; ours does not
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


# ---- material -----------------------------------------------------------------------------------------
def _pem_pair(cn: str) -> tuple[bytes, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


CA, _ = _pem_pair("test-ca")
CERT, KEY = _pem_pair("alice")
B64 = lambda data: base64.b64encode(data).decode()  # noqa: E731


def _jwt(claims: dict[str, Any]) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).decode().rstrip("=")  # noqa: E731
    return f"{enc({'alg': 'none'})}.{enc(claims)}.c2ln"


def _kubeconfig(
    cluster: dict[str, Any], user: dict[str, Any] | None, namespace: str | None = None, **extra: Any
) -> dict[str, Any]:
    ctx: dict[str, Any] = {"cluster": "c", **({"user": "u"} if user is not None else {})}
    if namespace:
        ctx["namespace"] = namespace
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}] if user is not None else [],
        "contexts": [{"name": "main", "context": ctx}],
        "current-context": "main",
    }
    doc.update(extra)
    return doc


def _plugin(tmp: Path, name: str, status: dict[str, Any]) -> str:
    """A tiny exec credential plugin; its token carries its args and $HP_ENV, to show both arrive."""
    path = tmp / f"{name}.py"
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "info = json.loads(os.environ['KUBERNETES_EXEC_INFO'])\n"
        "assert info['kind'] == 'ExecCredential', info\n"
        f"status = {status!r}\n"
        "if 'token' in status:\n"
        "    status['token'] += '-' + '-'.join(sys.argv[1:]) + '-' + os.environ.get('HP_ENV', '')\n"
        f"print(json.dumps({{'apiVersion': info['apiVersion'], 'kind': 'ExecCredential', 'status': status}}))\n"
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


https = {"server": "https://k8s.example:6443/", "certificate-authority-data": B64(CA)}


def shapes(tmp: Path) -> dict[str, tuple[dict[str, Any], str | None]]:
    """name -> (kubeconfig, --context). Files they point at are written into `tmp`."""
    (tmp / "ca.crt").write_bytes(CA)
    (tmp / "alice.crt").write_bytes(CERT)
    (tmp / "alice.key").write_bytes(KEY)
    (tmp / "token").write_text("file-token\n")
    soon = (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    two = _kubeconfig(https, {"token": "t1"}, namespace="team-a")
    two["contexts"].append({"name": "other", "context": {"cluster": "c", "user": "u", "namespace": "team-b"}})
    return {
        "token-and-ca-data": (_kubeconfig(https, {"token": "abc"}), None),
        "token-file-and-ca-file-relative": (
            _kubeconfig({"server": "https://k8s.example", "certificate-authority": "ca.crt"}, {"tokenFile": "token"}),
            None,
        ),
        "client-cert-data": (
            _kubeconfig(https, {"client-certificate-data": B64(CERT), "client-key-data": B64(KEY)}),
            None,
        ),
        "client-cert-files": (
            _kubeconfig(https, {"client-certificate": str(tmp / "alice.crt"), "client-key": str(tmp / "alice.key")}),
            None,
        ),
        "insecure-skip-tls-verify": (
            _kubeconfig({"server": "https://1.2.3.4:6443", "insecure-skip-tls-verify": True}, {"token": "x"}),
            None,
        ),
        "tls-server-name": (_kubeconfig({**https, "tls-server-name": "kubernetes.default"}, {"token": "x"}), None),
        "proxy-url": (_kubeconfig({**https, "proxy-url": "http://proxy.example:3128"}, {"token": "x"}), None),
        "basic-auth": (_kubeconfig(https, {"username": "admin", "password": "s3cret"}), None),
        "plain-http-no-user": (_kubeconfig({"server": "http://127.0.0.1:8080"}, None), None),
        "context-flag-and-namespace": (two, "other"),
        "token-beats-exec": (
            _kubeconfig(
                https,
                {
                    "token": "static",
                    "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/nonexistent"},
                },
            ),
            None,
        ),
        "exec-v1-token-args-env": (
            _kubeconfig(
                https,
                {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": _plugin(tmp, "token", {"token": "exec"}),
                        "args": ["a1", "a2"],
                        "env": [{"name": "HP_ENV", "value": "from-env"}],
                        "interactiveMode": "Never",
                    }
                },
            ),
            None,
        ),
        "exec-v1beta1-client-cert": (
            _kubeconfig(
                https,
                {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1beta1",
                        "command": _plugin(
                            tmp, "cert", {"clientCertificateData": CERT.decode(), "clientKeyData": KEY.decode()}
                        ),
                    }
                },
            ),
            None,
        ),
        "exec-with-expiry": (
            _kubeconfig(
                https,
                {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": _plugin(tmp, "expiring", {"token": "exp", "expirationTimestamp": soon}),
                    }
                },
            ),
            None,
        ),
        "auth-provider-oidc": (
            _kubeconfig(
                https,
                {
                    "auth-provider": {
                        "name": "oidc",
                        "config": {"id-token": _jwt({"sub": "alice", "exp": int(time.time()) + 3600})},
                    }
                },
            ),
            None,
        ),
        "auth-provider-gcp": (
            _kubeconfig(
                https,
                {"auth-provider": {"name": "gcp", "config": {"access-token": "ya29.token", "expiry": soon}}},
            ),
            None,
        ),
        "oidc-not-a-jwt-falls-through-to-token": (
            _kubeconfig(https, {"auth-provider": {"name": "oidc", "config": {"id-token": "opaque"}}, "token": "t"}),
            None,
        ),
    }


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def _auth(value: str | None) -> tuple[str, str] | None:
    if not value:
        return None
    scheme, _, rest = value.partition(" ")
    return scheme.lower(), rest.strip()


def official(path: Path, context: str | None, tmp: Path) -> dict[str, Any]:
    cfg = client.Configuration()
    official_config.load_kube_config(
        config_file=str(path), context=context, client_configuration=cfg, persist_config=False, temp_file_path=str(tmp)
    )
    return {
        "server": cfg.host,
        "verify": cfg.verify_ssl,
        "ca": _read(cfg.ssl_ca_cert),
        "cert": _read(cfg.cert_file),
        "key": _read(cfg.key_file),
        "authorization": _auth(cfg.api_key.get("BearerToken")),
        "tls_server_name": cfg.tls_server_name,
        "proxy": cfg.proxy,
    }


def ours(path: Path | str, context: str | None) -> dict[str, Any]:
    creds = config.load(str(path), context)
    pair = creds.auth.client_cert() or creds.client_cert or (None, None)
    creds.ssl_context()  # the TLS material must load, too
    return {
        "server": creds.server,
        "verify": not creds.insecure,
        "ca": creds.ca_pem,
        "cert": pair[0],
        "key": pair[1],
        "authorization": _auth(creds.authorization()),
        "tls_server_name": creds.tls_server_name,
        "proxy": creds.proxy_url,
    }


with tempfile.TemporaryDirectory() as _scratch:
    SHAPES = sorted(shapes(Path(_scratch)).keys())


def test_the_corpus_is_big_enough() -> None:
    assert len(SHAPES) >= 15


@pytest.mark.parametrize("shape", SHAPES)
def test_same_connection_as_the_official_client(shape: str, tmp_path: Path) -> None:
    work = tmp_path / "kube"
    work.mkdir()
    doc, context = shapes(work)[shape]
    path = work / "config"
    path.write_text(yaml.safe_dump(doc))
    theirs = official(path, context, tmp_path / "official-tmp")
    mine = ours(path, context)
    assert mine == theirs
    if shape == "context-flag-and-namespace":
        assert config.load(str(path), "other").namespace == "team-b"
        assert config.load(str(path)).namespace == "team-a"
    if shape == "exec-v1-token-args-env":
        assert mine["authorization"] == ("bearer", "exec-a1-a2-from-env")


def test_merged_kubeconfig_list_first_file_wins_for_entries(tmp_path: Path) -> None:
    """KUBECONFIG=a:b: the context in one file, the cluster and user in the other; a name in both
    is taken from the first."""
    (tmp_path / "a").write_text(
        yaml.safe_dump(
            {
                "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "from-a"}}],
                "current-context": "main",
            }
        )
    )
    (tmp_path / "b").write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": "https://b.example", "certificate-authority": "ca"}}],
                "users": [{"name": "u", "user": {"token": "from-b"}}],
            }
        )
    )
    (tmp_path / "ca").write_bytes(CA)
    listed = f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'missing'}{os.pathsep}{tmp_path / 'b'}"
    assert ours(listed, None) == official(Path(listed), None, tmp_path / "t")
    assert ours(listed, None)["authorization"] == ("bearer", "from-a")


def test_in_cluster_matches_the_official_loader(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token-1")
    (sa / "ca.crt").write_bytes(CA)
    (sa / "namespace").write_text("kube-system\n")
    for host in ("10.0.0.1", "fd00::1"):
        env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": "443"}
        cfg = client.Configuration()
        InClusterConfigLoader(str(sa / "token"), str(sa / "ca.crt"), environ=env).load_and_set(cfg)
        creds = config.in_cluster(sa_dir=sa, environ=env)
        assert creds.server == cfg.host
        assert creds.ca_pem == _read(cfg.ssl_ca_cert)
        assert _auth(creds.authorization()) == _auth(cfg.api_key["BearerToken"])
        assert creds.namespace == "kube-system"
    # the token is re-read when it rotates (here: on refresh, as after a 401)
    (sa / "token").write_text("sa-token-2")
    assert creds.auth.refresh() and creds.authorization() == "Bearer sa-token-2"


def _malformed(tmp: Path) -> dict[str, tuple[str, str | None, str]]:
    """name -> (file text, --context, what our error must say)."""
    good = _kubeconfig(https, {"token": "x"})
    bad_ctx = _kubeconfig(https, {"token": "x"})
    bad_ctx["contexts"][0]["context"]["cluster"] = "nope"
    no_name = _kubeconfig(https, {"token": "x"})
    del no_name["contexts"][0]["name"]
    no_cluster_key = _kubeconfig(https, {"token": "x"})
    del no_cluster_key["contexts"][0]["context"]["cluster"]
    return {
        "unknown-context": (yaml.safe_dump(good), "nope", "context 'nope' is not in the kubeconfig"),
        "context-names-missing-cluster": (yaml.safe_dump(bad_ctx), None, "names cluster 'nope'"),
        "context-without-cluster": (yaml.safe_dump(no_cluster_key), None, "context 'main' names no cluster"),
        "not-a-mapping": ("- just\n- a list\n", None, "expected a YAML mapping"),
        "not-yaml": ("clusters: [\n", None, "is not valid YAML: expected the node content"),
        "empty-file": ("", None, "no context chosen"),
        "entry-without-name": (yaml.safe_dump(no_name), None, "every entry of contexts needs a name"),
        "ca-file-missing": (
            yaml.safe_dump(_kubeconfig({"server": "https://x", "certificate-authority": "nope.crt"}, {"token": "x"})),
            None,
            "cannot read certificate-authority of cluster 'c'",
        ),
        "bad-base64-ca": (
            yaml.safe_dump(_kubeconfig({"server": "https://x", "certificate-authority-data": "abc"}, {"token": "x"})),
            None,
            "certificate-authority-data of cluster 'c' is not valid base64",
        ),
        "token-file-missing": (
            yaml.safe_dump(_kubeconfig(https, {"tokenFile": str(tmp / "no-token")})),
            None,
            "cannot read the token file",
        ),
        "gcp-without-token": (
            yaml.safe_dump(_kubeconfig(https, {"auth-provider": {"name": "gcp", "config": {}}})),
            None,
            "gcp auth-provider has no current access-token",
        ),
    }


MALFORMED = sorted(_malformed(Path("/nonexistent")).keys())


@pytest.mark.parametrize("shape", [*MALFORMED, "no-file"])
def test_malformed_kubeconfigs_fail_in_both_and_ours_says_why(shape: str, tmp_path: Path) -> None:
    path = tmp_path / "config"
    if shape == "no-file":
        text, context, says = None, None, "no kubeconfig file at"
    else:
        text, context, says = _malformed(tmp_path)[shape]
        path.write_text(text)
    with pytest.raises(Exception):  # noqa: B017 - the official client raises whatever it hits
        official(path, context, tmp_path / "t")
    with pytest.raises((ConfigError, CredentialError)) as err:
        ours(path, context)
    assert says in str(err.value)
    assert isinstance(err.value, KubeError) and "\n" not in str(err.value)


# ---- where we follow kubectl, or fail loudly, instead of the official client ---------------------------
def test_differences_from_the_official_client_are_deliberate(tmp_path: Path) -> None:
    # 1. KUBECONFIG=a:b, both set current-context: kubectl takes a's, the official client b's
    for name in ("a", "b"):
        doc = _kubeconfig(https, {"token": name})
        doc["contexts"][0]["name"] = doc["current-context"] = f"ctx-{name}"
        doc["clusters"][0]["name"] = doc["users"][0]["name"] = name
        doc["contexts"][0]["context"] = {"cluster": name, "user": name}
        (tmp_path / name).write_text(yaml.safe_dump(doc))
    listed = f"{tmp_path / 'a'}{os.pathsep}{tmp_path / 'b'}"
    assert ours(listed, None)["authorization"] == ("bearer", "a")
    assert official(Path(listed), None, tmp_path / "t")["authorization"] == ("bearer", "b")

    # 2. a failing exec plugin: the official client logs it and sends no credentials; we stop
    path = tmp_path / "exec"
    failing = _kubeconfig(https, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/false"}})
    path.write_text(yaml.safe_dump(failing))
    assert official(path, None, tmp_path / "t")["authorization"] is None
    with pytest.raises(CredentialError, match="exec plugin '/bin/false' exited 1"):
        ours(path, None)

    # 3. azure's access-token (kubectl's legacy provider): the official client ignores it
    path.write_text(
        yaml.safe_dump(_kubeconfig(https, {"auth-provider": {"name": "azure", "config": {"access-token": "az"}}}))
    )
    assert official(path, None, tmp_path / "t")["authorization"] is None
    assert ours(path, None)["authorization"] == ("bearer", "az")

    # 4. a name twice in one file: kubectl refuses the file, the official client takes the first
    dup = _kubeconfig(https, {"token": "x"})
    dup["contexts"].append(dup["contexts"][0])
    path.write_text(yaml.safe_dump(dup))
    assert official(path, None, tmp_path / "t")["authorization"] == ("bearer", "x")
    with pytest.raises(ConfigError, match="contexts names 'main' twice"):
        ours(path, None)

    # 5. impersonation (as, as-groups): kubectl sends the headers, the official client drops them
    path.write_text(yaml.safe_dump(_kubeconfig(https, {"token": "x", "as": "bob", "as-groups": ["g1", "g2"]})))
    assert config.load(str(path)).request_headers() == [
        ("Impersonate-User", "bob"),
        ("Impersonate-Group", "g1"),
        ("Impersonate-Group", "g2"),
        ("Authorization", "Bearer x"),
    ]
