"""Where the Authorization header (and an exec plugin's client certificate) comes from.

A credential can go stale while a process runs: a projected service-account token rotates, an
exec plugin's token expires. Each source here knows how to get a current one; the transports ask
for :meth:`Auth.authorization` before each request and call :meth:`Auth.refresh` once after a 401
(then retry once), as client-go does.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from hami_place_core.kube.errors import CredentialError

TOKEN_FILE_REREAD_SECONDS = 60.0  # client-go re-reads token files every minute; so does the official client
EXEC_TIMEOUT_SECONDS = 60.0
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class Auth:
    """No credentials of its own (client certificates alone, or a plain-http server)."""

    generation = 0  # bumped when client_cert() changes, so a transport rebuilds its TLS context

    def authorization(self) -> str | None:
        return None

    def client_cert(self) -> tuple[bytes, bytes] | None:
        return None

    def refresh(self) -> bool:
        """After a 401: get fresh credentials; True if a retry may now succeed."""
        return False


class StaticAuth(Auth):
    """A header fixed in the kubeconfig: a token, basic auth, an auth-provider's token."""

    def __init__(self, header: str) -> None:
        self.header = header

    def authorization(self) -> str | None:
        return self.header


class TokenFileAuth(Auth):
    """A bearer token read from a file, again every minute and after a 401: tokens rotate."""

    def __init__(self, path: str, reread_seconds: float = TOKEN_FILE_REREAD_SECONDS) -> None:
        self.path = path
        self.reread_seconds = reread_seconds
        self._cached: tuple[float, str] | None = None

    def _read(self) -> str:
        try:
            token = Path(self.path).read_text().strip()
        except OSError as e:
            raise CredentialError(f"cannot read the token file {self.path}: {e.strerror or e}") from e
        if not token:
            raise CredentialError(f"the token file {self.path} is empty")
        self._cached = (time.monotonic(), token)
        return token

    def authorization(self) -> str | None:
        if self._cached is None or time.monotonic() - self._cached[0] > self.reread_seconds:
            return f"Bearer {self._read()}"
        return f"Bearer {self._cached[1]}"

    def refresh(self) -> bool:
        before = self._cached[1] if self._cached else None
        return self._read() != before


class ExecAuth(Auth):
    """A client-go credential plugin (``users[].user.exec``), run again when its credential expires
    (``expirationTimestamp``) or is refused (401)."""

    def __init__(self, spec: dict[str, Any], base: Path, cluster: dict[str, Any] | None = None) -> None:
        if not spec.get("command"):
            raise CredentialError("kubeconfig exec plugin: no command")
        api_version = spec.get("apiVersion")
        if api_version not in EXEC_API_VERSIONS:
            raise CredentialError(
                f"kubeconfig exec plugin {spec['command']!r}: apiVersion {api_version!r} is not one of "
                + ", ".join(EXEC_API_VERSIONS)
            )
        self.spec, self.base, self.cluster = spec, base, cluster
        self._status: dict[str, Any] | None = None
        self._expires: float | None = None  # epoch seconds

    @property
    def command(self) -> str:
        return str(self.spec["command"])

    def _argv(self) -> list[str]:
        cmd = os.path.expanduser(self.command)
        if "/" in cmd and not os.path.isabs(cmd):  # kubectl: relative to the kubeconfig's directory
            cmd = str(self.base / cmd)
        return [cmd, *(str(a) for a in self.spec.get("args") or ())]

    def _run(self) -> dict[str, Any]:
        interactive = (
            self.spec.get("interactiveMode", "IfAvailable") != "Never" and sys.stdin is not None and sys.stdin.isatty()
        )
        info: dict[str, Any] = {"interactive": interactive}
        if self.spec.get("provideClusterInfo") and self.cluster is not None:
            info["cluster"] = self.cluster
        env = {**os.environ, **{str(e["name"]): str(e["value"]) for e in self.spec.get("env") or ()}}
        env["KUBERNETES_EXEC_INFO"] = json.dumps(
            {"apiVersion": self.spec["apiVersion"], "kind": "ExecCredential", "spec": info}
        )
        argv = self._argv()
        try:
            done = subprocess.run(
                argv,
                env=env,
                stdin=None if interactive else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=None if interactive else subprocess.PIPE,  # prompts reach the user
                text=True,
                timeout=EXEC_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as e:
            raise CredentialError(f"kubeconfig exec plugin {self.command!r} failed to run: {e}") from e
        if done.returncode != 0:
            last = ((done.stderr or "").strip().splitlines() or [""])[-1]
            raise CredentialError(f"kubeconfig exec plugin {self.command!r} exited {done.returncode}: {last}")
        return self._parse(done.stdout)

    def _parse(self, stdout: str) -> dict[str, Any]:
        try:
            out = json.loads(stdout)
            status = dict(out["status"])
        except (ValueError, KeyError, TypeError) as e:
            raise CredentialError(f"kubeconfig exec plugin {self.command!r} printed no ExecCredential JSON") from e
        if out.get("apiVersion", self.spec["apiVersion"]) != self.spec["apiVersion"]:
            raise CredentialError(
                f"kubeconfig exec plugin {self.command!r} answered {out.get('apiVersion')}, "
                f"not the {self.spec['apiVersion']} it was asked for"
            )
        if not status.get("token") and not (status.get("clientCertificateData") and status.get("clientKeyData")):
            raise CredentialError(
                f"kubeconfig exec plugin {self.command!r} gave neither a token nor a client certificate and key"
            )
        return status

    def _current(self) -> dict[str, Any]:
        if self._status is None or (self._expires is not None and time.time() >= self._expires):
            self._load()
        assert self._status is not None
        return self._status

    def _load(self) -> None:
        old_cert = self._cert_of(self._status)
        self._status = self._run()
        stamp = self._status.get("expirationTimestamp")
        self._expires = _rfc3339(stamp) if stamp else None
        if self._cert_of(self._status) != old_cert:
            self.generation += 1

    @staticmethod
    def _cert_of(status: dict[str, Any] | None) -> tuple[bytes, bytes] | None:
        if not status or not status.get("clientCertificateData"):
            return None
        return str(status["clientCertificateData"]).encode(), str(status["clientKeyData"]).encode()

    def authorization(self) -> str | None:
        token = self._current().get("token")
        return f"Bearer {token}" if token else None

    def client_cert(self) -> tuple[bytes, bytes] | None:
        return self._cert_of(self._current())

    def refresh(self) -> bool:
        self._load()
        return True


def basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _rfc3339(text: str) -> float:
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise CredentialError(f"credential expiry {text!r} is not an RFC 3339 time") from e


def jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT, or None when it has none; ValueError when it is no JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT")
    claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if exp is not None else None
