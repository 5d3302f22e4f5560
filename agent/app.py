"""The agent's app factory: one Sanic process holding webhooks, the watch cache, REST and controller.

A single process on purpose: the in-memory cache and the controller must not be forked into
workers (Sanic guide, "Single process mode"). Handlers are thin; logic lives in mutate, validate,
views and controller.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sanic import Blueprint, Request, Sanic
from sanic import response as r
from sanic.exceptions import SanicException
from sanic.handlers import ErrorHandler

from agent import metrics, views
from agent.admission import Verdict, encode_response, parse_review
from agent.auth import Authorizer
from agent.autopilot import Autopilot
from agent.cache import ClusterCache
from agent.config import Settings
from agent.controller import PlacementController
from agent.errors import AgentError, Missing, NotReady
from agent.events import EventRecorder
from agent.kube import AsyncKube, Credentials, load_credentials
from agent.leader import LeaderElector
from agent.loop_lag import watch_lag
from agent.mutate import PodMutator
from agent.tls import ServingTLS, require_webhook_client
from agent.validate import PlacementValidator
from agent.validate_policy import PolicyValidator
from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp

log = logging.getLogger("hami_place.agent")

JSON = "application/json"


class JsonErrors(ErrorHandler):
    """Every error leaves as JSON with its HTTP code; unexpected ones are logged and counted."""

    def default(self, request: Request, exception: Exception) -> r.HTTPResponse:
        if isinstance(exception, AgentError):
            return r.json(exception.body(), status=exception.http_code)
        if isinstance(exception, SanicException):
            code = int(getattr(exception, "status_code", 500) or 500)
            return r.json({"error": type(exception).__name__, "code": code, "message": str(exception)}, status=code)
        if isinstance(exception, asyncio.CancelledError):
            # The client went away mid-request (a truncated body, a closed connection): nobody
            # reads this answer, and it is not the agent's error (issue 39, item 6).
            log.info("%s %s: the client went away before the answer", request.method, request.path)
            return r.json({"error": "RequestCancelled", "code": 400, "message": "request cancelled"}, status=400)
        metrics.ERRORS.labels(kind="http").inc()
        log.exception("unhandled error on %s %s", request.method, request.path)
        return r.json({"error": "InternalError", "code": 500, "message": str(exception)}, status=500)


def create_app(
    settings: Settings,
    name: str = "hami-place-agent",
    tls: ServingTLS | None = None,
    credentials: Credentials | None = None,
) -> Sanic:
    """`credentials`: loaded by the caller (`python -m agent` does, to refuse bad ones before
    serving); without them, from the settings when the server starts."""
    app = Sanic(name, error_handler=JsonErrors(), configure_logging=False)
    app.config.FALLBACK_ERROR_FORMAT = "json"
    app.config.ACCESS_LOG = False
    app.config.REQUEST_MAX_SIZE = 8 * 1024 * 1024  # an AdmissionReview of a huge pod still fits
    app.config.KEEP_ALIVE_TIMEOUT = 30
    app.ctx.settings = settings
    app.ctx.started = time.monotonic()
    app.ctx.tls = tls
    app.ctx.credentials = credentials

    @app.before_server_start
    async def start(app: Sanic) -> None:
        s: Settings = app.ctx.settings
        kube = AsyncKube(app.ctx.credentials or load_credentials(s.kubeconfig or None, s.token_file or None))
        cache = ClusterCache(kube, policies=s.autopilot_enabled)
        events = EventRecorder(kube, s.agent_id)
        app.ctx.kube, app.ctx.cache, app.ctx.events = kube, cache, events
        app.ctx.mutator = PodMutator(s, cache, kube, events)
        app.ctx.validator = PlacementValidator(s, cache, kube)
        app.ctx.policy_validator = PolicyValidator(kube)
        app.ctx.authorizer = Authorizer(kube)
        app.ctx.leader = LeaderElector(s, kube)
        app.ctx.controller = PlacementController(s, cache, kube, events, app.ctx.leader)
        metrics.CLUSTER.attach(cache, s.metrics_pool_label)
        cache.start()
        app.ctx.leader_task = asyncio.create_task(app.ctx.leader.run(), name="leader-election")
        app.ctx.controller_task = asyncio.create_task(app.ctx.controller.run(), name="placement-controller")
        app.ctx.autopilot_task = None
        app.ctx.tls_task = None
        app.ctx.lag_task = asyncio.create_task(watch_lag(), name="event-loop-lag")
        if app.ctx.tls is not None and s.cert_reload_seconds > 0:
            app.ctx.tls_task = asyncio.create_task(app.ctx.tls.watch(s.cert_reload_seconds), name="tls-reload")
        if s.autopilot_enabled:
            autopilot = Autopilot(s, cache, kube, events, app.ctx.leader)
            app.ctx.autopilot_task = asyncio.create_task(autopilot.run(), name="autopilot")
        log.info("agent %s starting with %s", s.agent_id, json.dumps(s.describe(), default=str))

    @app.after_server_stop
    async def stop(app: Sanic) -> None:
        running = (
            app.ctx.controller_task,
            app.ctx.leader_task,
            app.ctx.autopilot_task,
            app.ctx.tls_task,
            app.ctx.lag_task,
        )
        tasks = [t for t in running if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await app.ctx.cache.stop()
        await app.ctx.kube.close()

    app.blueprint(webhooks_bp())
    app.blueprint(health_bp())
    app.blueprint(rest_bp())
    return app


# ---- webhooks ---------------------------------------------------------------------------------------
def via_proxy_port(request: Request) -> bool:
    """Did the request arrive on the read-only listener for the API server's service proxy?"""
    return _via_port(request, request.app.ctx.settings.proxy_port)


def via_metrics_port(request: Request) -> bool:
    """Did the request arrive on the plain HTTP metrics listener (health and /metrics only)?"""
    return _via_port(request, request.app.ctx.settings.metrics_port)


def _via_port(request: Request, port: int) -> bool:
    info = request.conn_info
    return bool(port) and info is not None and info.server_port == port


def webhooks_bp() -> Blueprint:
    bp = Blueprint("webhooks")

    # Called first by each handler rather than as the blueprint's request middleware: any
    # middleware at all makes Sanic run its middleware machinery on every request (about 4-5% of the
    # no-match review rate).
    def main_port_only(request: Request) -> None:
        # Through the service proxy anyone with services/proxy `create` could POST reviews.
        if via_proxy_port(request) or via_metrics_port(request):
            raise Missing(f"{request.path} is not served on this port (the webhooks are on the TLS port)")
        info = request.conn_info
        require_webhook_client(request.app.ctx.settings, request.transport, info.ctx if info is not None else None)

    # The answers are encoded once, by orjson, and sent as they are (r.json would encode again).
    @bp.post("/mutate")
    async def mutate(request: Request) -> r.HTTPResponse:
        main_port_only(request)
        t0 = time.perf_counter()
        review = parse_review(request.body)  # InvalidRequest -> 400 JSON
        verdict: Verdict = await request.app.ctx.mutator.review(review)
        body = encode_response(review, verdict)
        metrics.OBSERVE_ADMISSION["mutate", "patched" if verdict.patch else "unchanged"](time.perf_counter() - t0)
        return r.raw(body, content_type=JSON)

    @bp.post("/validate")
    async def validate(request: Request) -> r.HTTPResponse:
        main_port_only(request)
        t0 = time.perf_counter()
        review = parse_review(request.body)
        ctx = request.app.ctx
        validator = ctx.policy_validator if review.kind.get("kind") == dp.KIND else ctx.validator
        verdict: Verdict = await validator.review(review)
        body = encode_response(review, verdict)
        metrics.OBSERVE_ADMISSION["validate", "allowed" if verdict.allowed else "denied"](time.perf_counter() - t0)
        return r.raw(body, content_type=JSON)

    return bp


# ---- health and metrics ---------------------------------------------------------------------------
def readiness(app: Sanic) -> tuple[bool, dict[str, Any]]:
    s: Settings = app.ctx.settings
    cache: ClusterCache = app.ctx.cache
    checks: dict[str, Any] = {}
    for inf in cache.sync_status():
        metrics.CACHE_SYNCED.labels(resource=inf.name).set(1 if inf.synced else 0)
        optional = cache.is_optional(inf.name)
        checks[f"cache-synced-{inf.name}"] = {
            "ok": inf.synced or optional,
            **({"synced": inf.synced, "note": "only the autopilot needs it"} if optional else {}),
            **({"lastError": inf.last_error} if inf.last_error else {}),
        }
    if s.tls_cert_file:
        checks["certificate-loaded"] = {"ok": Path(s.tls_cert_file).is_file()}
    else:
        checks["certificate-loaded"] = {"ok": True, "note": "TLS disabled (HAMI_PLACE_TLS_CERT_FILE unset)"}
    # Readiness never depends on leadership: every replica serves the webhooks.
    is_leader = app.ctx.leader.is_leader
    metrics.LEADER.set(1 if is_leader else 0)
    checks["leader"] = {
        "ok": True,
        "leader": is_leader,
        **({} if s.leader_election else {"note": "leader election off: this replica acts"}),
    }
    return all(c["ok"] for c in checks.values()), checks


def health_bp() -> Blueprint:
    bp = Blueprint("health")

    @bp.get("/healthz")
    async def healthz(request: Request) -> r.HTTPResponse:
        return r.json({"status": "ok", "uptimeSeconds": round(time.monotonic() - request.app.ctx.started, 1)})

    @bp.get("/readyz")
    async def readyz(request: Request) -> r.HTTPResponse:
        ok, checks = readiness(request.app)
        return r.json({"status": "ok" if ok else "not ready", "checks": checks}, status=200 if ok else 503)

    @bp.get("/metrics")
    async def prometheus(request: Request) -> r.HTTPResponse:
        readiness(request.app)  # refresh the cache gauges
        return r.raw(generate_latest(metrics.REGISTRY), content_type=CONTENT_TYPE_LATEST)

    return bp


# ---- REST API ---------------------------------------------------------------------------------------
async def _caller_may(
    request: Request, verb: str, namespace: str = "", resources: tuple[tuple[str, str], ...] = ((hp.GROUP, hp.PLURAL),)
) -> None:
    """Authenticate the caller and authorize `verb` on each (group, resource) in `namespace`."""
    if via_metrics_port(request):
        raise Missing(f"{request.path} is not served on the metrics port (only /metrics, /healthz, /readyz)")
    if via_proxy_port(request):
        # The API server authenticated the user and authorized `get services/proxy` on this
        # Service before forwarding (it strips the user's credentials, so there is nothing to
        # check again here); the NetworkPolicy admits only the control plane to this port.
        # See docs/security.md.
        return
    authz: Authorizer = request.app.ctx.authorizer
    caller = await authz.authenticate(request.headers.get("authorization"))
    for group, resource in resources:
        await authz.authorize(caller, verb, namespace, group, resource)


def _require_ready(request: Request) -> ClusterCache:
    cache: ClusterCache = request.app.ctx.cache
    if not cache.ready:
        raise NotReady()
    return cache


def rest_bp() -> Blueprint:
    bp = Blueprint("rest", url_prefix="/api/v1")

    @bp.get("/cluster-info")
    async def cluster_info(request: Request) -> r.HTTPResponse:
        """Nodes, GPUs, usage, health and fragmentation. 401/403 without RBAC, 503 until synced.
        It is the nodes' and every namespace's pods' data, so the caller must be allowed to list
        both cluster-wide (as `kubectl hami-place inspect` must), not only placements."""
        await _caller_may(request, "list", "", (("", "nodes"), ("", "pods")))
        return r.json(views.cluster_info(_require_ready(request)))

    @bp.get("/placements")
    async def placements(request: Request) -> r.HTTPResponse:
        """The placement cache with claim and allocation records; ?namespace= narrows it."""
        namespace = request.args.get("namespace") or ""
        await _caller_may(request, "list", namespace)
        return r.json(views.placements(_require_ready(request), namespace or None))

    @bp.get("/placements/<namespace>/<name>/events")
    async def events(request: Request, namespace: str, name: str) -> None:
        """Server-Sent Events: the placement now, then each change, until it is terminal."""
        await _caller_may(request, "watch", namespace)
        cache = _require_ready(request)
        p = cache.placement(namespace, name)
        if p is None:
            raise Missing(f"placement {namespace}/{name} not found")
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=256)

        def on_change(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            meta = obj.get("metadata") or {}
            if meta.get("namespace") == namespace and meta.get("name") == name:
                # a stalled client skips intermediate states; it still gets the latest
                with contextlib.suppress(asyncio.QueueFull):
                    queue.put_nowait({"kind": kind, "object": obj})

        unsubscribe = cache.subscribe("placements", on_change)
        resp = await request.respond(content_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            async for frame in views.placement_events(p, queue):
                await resp.send(frame)
        finally:
            unsubscribe()
            await resp.eof()

    return bp
