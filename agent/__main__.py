"""`python -m agent`: run the agent, configured from HAMI_PLACE_* environment variables."""

from __future__ import annotations

import sys

from sanic import Sanic

from agent import logs
from agent.app import create_app
from agent.config import ConfigError, Settings
from agent.intents import IntentKeyError, IntentSigner
from agent.kube import load_credentials
from agent.tls import server_context
from hami_place_core.kube.errors import KubeError


def main() -> int:
    try:
        settings = Settings.from_env()
    except ConfigError as e:
        print(f"hami-place agent: bad configuration: {e}", file=sys.stderr)
        return 2
    try:
        if settings.intent_key_file:
            IntentSigner(settings.intent_key_file)  # a missing or short key refuses to start
    except IntentKeyError as e:
        print(f"hami-place agent: bad configuration: {e}", file=sys.stderr)
        return 2
    try:
        tls = server_context(settings)
    except (OSError, ValueError) as e:  # ssl.SSLError is an OSError
        print(f"hami-place agent: cannot load TLS files: {e}", file=sys.stderr)
        return 2
    try:
        # Refused here, in one line, rather than as a traceback from the server's start-up hook.
        credentials = load_credentials(settings.kubeconfig or None, settings.token_file or None)
    except KubeError as e:
        print(f"hami-place agent: no usable Kubernetes credentials: {e}", file=sys.stderr)
        return 2
    logs.setup(settings.log_level)
    app = create_app(settings, tls=tls, credentials=credentials)
    ssl = tls.context if tls is not None else None
    common = {"host": settings.host, "ssl": ssl, "single_process": True, "access_log": False, "motd": False}
    app.prepare(port=settings.port, **common)  # type: ignore[arg-type]
    if settings.proxy_port:
        # a second listener in the same process and loop: the service-proxy path (docs/security.md)
        app.prepare(port=settings.proxy_port, **common)  # type: ignore[arg-type]
    if settings.metrics_port:
        # plain HTTP for Prometheus: metrics and probes only (agent/app.py refuses the rest there)
        app.prepare(port=settings.metrics_port, **{**common, "ssl": None})  # type: ignore[arg-type]
    Sanic.serve_single(primary=app)
    return 0


if __name__ == "__main__":
    sys.exit(main())
