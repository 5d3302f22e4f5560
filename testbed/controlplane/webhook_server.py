"""A throw-away admission webhook server for tests: HTTPS on 127.0.0.1 with its own CA.

It records every AdmissionReview it receives and answers with whatever the test's responder
returns, so tests can prove what the real kube-apiserver sends and how it applies a patch.
"""

from __future__ import annotations

import base64
import json
import ssl
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from testbed.controlplane.certs import CertificateAuthority

Review = dict[str, Any]
Responder = Callable[[Review], dict[str, Any]]


def allow(review: Review) -> dict[str, Any]:
    return {"uid": review["request"]["uid"], "allowed": True}


def json_patch(ops: list[dict[str, Any]]) -> Responder:
    def respond(review: Review) -> dict[str, Any]:
        return {
            "uid": review["request"]["uid"],
            "allowed": True,
            "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(ops).encode()).decode(),
        }

    return respond


class WebhookServer:
    def __init__(self, responder: Responder = allow) -> None:
        self.responder = responder
        self.reviews: list[Review] = []
        self.ca = CertificateAuthority("throwaway-webhook-ca")
        self._dir = tempfile.TemporaryDirectory(prefix="webhook-")
        crt, key = self.ca.issue_server(["127.0.0.1"]).write(Path(self._dir.name), "tls")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(crt), str(key))
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                review = json.loads(body)
                outer.reviews.append(review)
                out = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": outer.responder(review),
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca.cert_pem).decode()

    def __enter__(self) -> WebhookServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._dir.cleanup()
