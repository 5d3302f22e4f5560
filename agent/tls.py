"""The agent's TLS: its serving context, and who may call the webhook paths.

Why client certificates: the webhooks share the agent's port with the REST API, and anything that
can reach that port can POST a crafted AdmissionReview to /mutate. A forged pod review claims a
pending placement (held until its lease runs out) and a forged placement review probes validation.
The API server can present a client certificate to webhooks (its --admission-control-config-file
points WebhookAdmission at a kubeconfig; kubernetes docs, "Authenticate API servers"), so when
HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE is set the agent asks every TLS client for a certificate and the
webhook paths accept only a verified one (optionally only these subjects). The REST API is
unchanged: its callers present bearer tokens, so the certificate stays optional at the handshake.

Rotation (as controller-runtime's certwatcher): cert-manager, or any Secret update, rewrites the
files in place; :class:`ServingTLS` hands every new handshake the context built from the files as
they are now (an SNI callback, which OpenSSL calls for every ClientHello, SNI or not), so a renewed
serving certificate or a changed client CA takes effect without a restart and without touching
open connections. Files read half-written (a certificate whose key is not there yet) keep the
previous context until the next poll.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import ssl
from pathlib import Path
from typing import Any

from agent import metrics
from agent.config import Settings
from agent.errors import Unauthenticated

log = logging.getLogger("hami_place.agent.tls")


class ServingTLS:
    """The listener's TLS context, whose certificate and webhook client CA follow their files."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.current = build_context(settings)
        self.fingerprint = _fingerprint(settings)
        # What the listener holds: it only passes each handshake on to the current context.
        self.context = build_context(settings)
        self.context.sni_callback = self._select

    def _select(self, ssl_object: Any, server_name: str | None, _ctx: ssl.SSLContext) -> None:
        ssl_object.context = self.current

    def reload(self) -> bool:
        """Load the files again if they changed; True when a new context took over."""
        try:
            fingerprint = _fingerprint(self.settings)
        except OSError as e:
            return self._failed(e)
        if fingerprint == self.fingerprint:
            return False
        try:
            fresh = build_context(self.settings)
        except (OSError, ValueError) as e:  # ssl.SSLError is an OSError: a mismatched pair, a partial write
            return self._failed(e)
        self.current, self.fingerprint = fresh, fingerprint
        metrics.CERT_RELOADS.labels(result="reloaded").inc()
        log.info("TLS files changed: new handshakes use the new certificate and client CA")
        return True

    def _failed(self, error: Exception) -> bool:
        metrics.CERT_RELOADS.labels(result="failed").inc()
        log.warning("TLS files changed but cannot be loaded (kept the previous ones; retrying): %s", error)
        return False

    async def watch(self, interval: float) -> None:
        """Poll the files (a Secret volume swaps a symlink; polling the contents sees every kind of update)."""
        while True:
            await asyncio.sleep(interval)
            self.reload()


def _fingerprint(settings: Settings) -> str:
    digest = hashlib.sha256()
    for name in (settings.tls_cert_file, settings.tls_key_file, settings.webhook_client_ca_file):
        digest.update(Path(name).read_bytes() if name else b"")
        digest.update(b"\0")
    return digest.hexdigest()


def server_context(settings: Settings) -> ServingTLS | None:
    return ServingTLS(settings) if settings.tls_cert_file else None


def build_context(settings: Settings) -> ssl.SSLContext:
    # Not create_default_context(CLIENT_AUTH): that also trusts the system's public CAs for client
    # certificates, and then any publicly issued certificate would pass as the API server's.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(settings.tls_cert_file, settings.tls_key_file)
    if settings.webhook_client_ca_file:
        ctx.load_verify_locations(cafile=settings.webhook_client_ca_file)
        # OPTIONAL, not REQUIRED: REST callers and probes connect without a certificate; a
        # certificate that is presented must still verify, or the handshake fails.
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


def peer_subject(transport: Any) -> dict[str, str] | None:
    """The verified client certificate's subject (CN, O, ...), or None when none was presented."""
    ssl_object = transport.get_extra_info("ssl_object") if transport is not None else None
    cert = ssl_object.getpeercert() if ssl_object is not None else None
    if not cert:
        return None
    return {key: value for rdn in cert.get("subject", ()) for key, value in rdn}


def require_webhook_client(settings: Settings, transport: Any, conn_ctx: Any = None) -> None:
    """Raise Unauthenticated (401) unless the caller is the API server, when that is enforced.

    The certificate belongs to the TLS connection, so the verdict is kept in the connection's
    context (`conn_ctx`, Sanic's ConnInfo.ctx) and the webhook hot path decodes it once per
    connection, not once per review."""
    if not settings.webhook_client_ca_file:
        return
    verdict = getattr(conn_ctx, "webhook_client_verdict", None)
    if verdict is None:
        verdict = _verdict(settings, transport)
        if conn_ctx is not None:
            conn_ctx.webhook_client_verdict = verdict
    if verdict:
        raise Unauthenticated(verdict)


def _verdict(settings: Settings, transport: Any) -> str:
    """Why this connection may not call the webhooks; empty when it may."""
    subject = peer_subject(transport)
    if subject is None:
        return (
            "webhook calls must present a client certificate signed by HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE "
            "(the API server's WebhookAdmission kubeconfig; docs/security.md)"
        )
    names = settings.webhook_client_names
    if names and subject.get("commonName", "") not in names:
        return f"client certificate CN {subject.get('commonName', '')!r} is not one of HAMI_PLACE_WEBHOOK_CLIENT_NAMES"
    return ""
