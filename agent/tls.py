"""The agent's TLS: its serving context, and who may call the webhook paths.

Why client certificates: the webhooks share the agent's port with the REST API, and anything that
can reach that port can POST a crafted AdmissionReview to /mutate. A forged pod review claims a
pending placement (held until its lease runs out) and a forged placement review probes validation.
The API server can present a client certificate to webhooks (its --admission-control-config-file
points WebhookAdmission at a kubeconfig; kubernetes docs, "Authenticate API servers"), so when
HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE is set the agent asks every TLS client for a certificate and the
webhook paths accept only a verified one (optionally only these subjects). The REST API is
unchanged: its callers present bearer tokens, so the certificate stays optional at the handshake.
"""

from __future__ import annotations

import ssl
from typing import Any

from agent.config import Settings
from agent.errors import Unauthenticated


def server_context(settings: Settings) -> ssl.SSLContext | None:
    if not settings.tls_cert_file:
        return None
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
