"""Following a placement until it is done: the agent's SSE stream, or a watch on the object.

The preferred source is the agent's `/api/v1/placements/{ns}/{name}/events`, reached through the
API server's service proxy: it works with every kubeconfig auth type and needs no port-forward,
and the API server's RBAC on `services/proxy` decides who may read it. When the agent cannot be
reached that way (not installed, no proxy listener, RBAC), the CLI says so once and watches the
HamiPodPlacement itself, which carries the same phases, reasons and messages in its status.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube

SSE_SILENCE_SECONDS = 20.0  # the agent sends a keep-alive every 15 s
CACHE_GRACE_SECONDS = 3.0  # how long a just-created placement may take to reach the agent's cache
WATCH_SECONDS = 300


@dataclass(frozen=True)
class AgentRef:
    """Where the agent's read-only proxy listener is: a Service port, by name."""

    namespace: str = "kube-system"
    service: str = "gpu-descheduler-webhook"  # DEFAULT_SERVICE
    port: str = "proxy"

    def events_path(self, namespace: str, name: str) -> str:
        return (
            f"/api/v1/namespaces/{self.namespace}/services/https:{self.service}:{self.port}"
            f"/proxy/api/v1/placements/{namespace}/{name}/events"
        )


# On the chart's Service when its progress port is on (chart/templates/service.yaml): how the
# plugin finds the agent whatever the release is called.
PROGRESS_LABEL = "scheduling.hami.placement.com/progress"
# The Service name of the release the HAMi design page installs (gpu-descheduler), tried when no
# Service carries the label or the user may not list Services there.
DEFAULT_SERVICE = "gpu-descheduler-webhook"


def find_agent(kube: Kube, namespace: str, service: str | None) -> AgentRef:
    """The agent's progress Service in `namespace`: the one named, else the one labelled
    PROGRESS_LABEL=true there (any release name), else DEFAULT_SERVICE. Of several labelled
    Services (two releases in one namespace) the first by name, said on stderr: the placement
    exists by now, so this never fails the command."""
    if service:
        return AgentRef(namespace, service)
    try:
        found = kube.request(
            "GET", f"/api/v1/namespaces/{namespace}/services", {"labelSelector": f"{PROGRESS_LABEL}=true"}
        )
    except kube_errors.KubeError:
        return AgentRef(namespace, DEFAULT_SERVICE)  # no right to list Services: the default name
    names = sorted(str((s.get("metadata") or {}).get("name")) for s in found.get("items") or ())
    if len(names) > 1:
        print(
            f"note: {len(names)} hami-place agents serve progress in namespace {namespace} ({', '.join(names)}); "
            f"following through {names[0]} (name one with --agent-service)",
            file=sys.stderr,
        )
    return AgentRef(namespace, names[0] if names else DEFAULT_SERVICE)


class FollowTimeout(UserError):
    """The deadline passed before the placement reached a terminal phase."""

    def __init__(self, message: str, last: dict[str, Any] | None) -> None:
        super().__init__(message)
        self.last = last


def describe(view: dict[str, Any]) -> str:
    """One line for a placement's state: the phase, and the reason and message when there are."""
    phase, reason, message = view.get("phase") or hp.PENDING, view.get("reason"), view.get("message")
    if not message:
        message = {
            hp.PENDING: "waiting for a matching pod to be created",
            hp.CLAIMED: "a pod was admitted with the pin; waiting for it to appear",
            hp.BOUND: f"pod {view.get('boundPod') or '?'} bound; waiting for HAMi's allocation",
        }.get(phase, "")
    head = f"{phase} ({reason})" if reason and reason != phase else phase
    return f"{head}: {message}" if message else head


class Reporter:
    """Prints each state change once. On a TTY a spinner line shows the current state and the
    time spent; otherwise every line is timestamped, for logs and CI."""

    SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"

    def __init__(self, out: TextIO | None = None, tty: bool | None = None) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.started = time.monotonic()
        self.current = ""
        self._last_key: tuple[Any, ...] | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._spinner: threading.Thread | None = None

    def __enter__(self) -> Reporter:
        if self.tty:
            self._spinner = threading.Thread(target=self._spin, name="spinner", daemon=True)
            self._spinner.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._spinner is not None:
            self._spinner.join(1)
            with self._lock:
                self.out.write("\r\x1b[K")
                self.out.flush()

    def _spin(self) -> None:
        i = 0
        while not self._stop.wait(0.1):
            with self._lock:
                if self.current:
                    frame = self.SPINNER[i % len(self.SPINNER)]
                    self.out.write(f"\r\x1b[K{frame} {self.current} [{time.monotonic() - self.started:.1f}s]")
                    self.out.flush()
            i += 1

    def line(self, text: str) -> None:
        with self._lock:
            if self.tty:
                self.out.write(f"\r\x1b[K[{time.monotonic() - self.started:5.1f}s] {text}\n")
            else:
                stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.out.write(f"{stamp} {text}\n")
            self.out.flush()

    def show(self, view: dict[str, Any]) -> None:
        key = (view.get("phase"), view.get("reason"), view.get("message"), view.get("boundPod"))
        if key == self._last_key:
            return
        self._last_key = key
        self.current = describe(view)
        self.line(self.current)


def _sse_views(kube: Kube, agent: AgentRef, namespace: str, name: str, silence: float) -> Iterator[dict[str, Any]]:
    event, data = "message", list[str]()
    for raw in kube.stream(agent.events_path(namespace, name), read_timeout=silence):
        line = raw.decode("utf-8", "replace").rstrip("\r")
        if not line:
            if data:
                payload = json.loads("\n".join(data))
                if event == "deleted":
                    raise UserError(f"placement {namespace}/{name} was deleted")
                if event == "placement":
                    yield payload
            event, data = "message", []
        elif line.startswith(":"):
            yield {}  # keep-alive: lets the caller check its deadline
        elif line.startswith("event:"):
            event = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].lstrip())


def _get_view(kube: Kube, namespace: str, name: str) -> tuple[dict[str, Any], str]:
    try:
        obj = kube.request("GET", hp.placement_path(namespace, name))
    except kube_errors.NotFound as e:
        raise UserError(f"placement {namespace}/{name} not found") from e
    return hp.placement_view(hp.Placement.from_object(obj)), str(obj["metadata"]["resourceVersion"])


def _watch_views(
    kube: Kube, namespace: str, name: str, remaining: Callable[[], float | None]
) -> Iterator[dict[str, Any]]:
    """The placement now, then each change: list-then-watch from that resourceVersion, again on 410."""
    view, rv = _get_view(kube, namespace, name)
    yield view
    while True:
        left = remaining()
        seconds = WATCH_SECONDS if left is None else max(1, min(WATCH_SECONDS, int(left) + 1))
        query = {
            "fieldSelector": f"metadata.name={name}",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": seconds,
        }
        try:
            for ev in kube.watch(hp.placement_path(namespace), query, read_timeout=seconds + 10):
                obj = ev.get("object") or {}
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if ev.get("type") == "DELETED":
                    raise UserError(f"placement {namespace}/{name} was deleted")
                if ev.get("type") in ("ADDED", "MODIFIED"):
                    yield hp.placement_view(hp.Placement.from_object(obj))
        except kube_errors.Gone:  # too old: re-read below
            view, rv = _get_view(kube, namespace, name)
            yield view
            continue
        yield {}  # the server ended the watch (timeoutSeconds): check the deadline, resume


class _Deadline:
    """The time left to follow, if any (None: no limit)."""

    def __init__(self, timeout: float | None) -> None:
        self._end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self._end is None else self._end - time.monotonic()

    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0


def follow(
    kube: Kube,
    namespace: str,
    name: str,
    reporter: Reporter,
    agent: AgentRef | None = None,
    timeout: float | None = None,
    note: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Report the placement's progress until it is Completed, Failed or Cancelled; return that view.

    Raises FollowTimeout when `timeout` seconds pass first (the placement stays as it is)."""
    deadline = _Deadline(timeout)
    last: dict[str, Any] | None = None

    def run(views: Iterator[dict[str, Any]]) -> dict[str, Any] | None:
        nonlocal last
        for view in views:
            if view:
                last = view
                reporter.show(view)
                if view.get("phase") in hp.TERMINAL:
                    return view
            if deadline.expired():
                break
        return None

    if agent is not None:
        done = _follow_agent(kube, agent, namespace, name, deadline, run, note or _stderr)
        if done is not None:
            return done
    while not deadline.expired():
        try:
            done = run(_watch_views(kube, namespace, name, deadline.remaining))
        except kube_errors.Unreachable:
            if deadline.expired():
                break
            raise
        if done is not None:
            return done
    where = describe(last) if last else "unknown"
    raise FollowTimeout(f"timed out after {timeout:g}s; placement {namespace}/{name} is still {where}", last)


def _follow_agent(
    kube: Kube,
    agent: AgentRef,
    namespace: str,
    name: str,
    deadline: _Deadline,
    run: Callable[[Iterator[dict[str, Any]]], dict[str, Any] | None],
    note: Callable[[str], None],
) -> dict[str, Any] | None:
    """Follow through the agent's stream; None when it ends first or is unavailable (said in a note)."""
    left = deadline.remaining()
    silence = SSE_SILENCE_SECONDS if left is None else max(0.5, min(SSE_SILENCE_SECONDS, left))
    try:
        return run(_sse_views_when_cached(kube, agent, namespace, name, silence))
    except (kube_errors.KubeError, ValueError) as e:
        if not deadline.expired():
            note(
                f"note: the agent's progress stream is unavailable ({_short(e)}); "
                "following the placement object instead"
            )
    return None


def _sse_views_when_cached(
    kube: Kube, agent: AgentRef, namespace: str, name: str, silence: float, grace: float = CACHE_GRACE_SECONDS
) -> Iterator[dict[str, Any]]:
    """The agent's stream; a placement created a moment ago may not be in its watch cache yet, and
    the agent answers 404 for it until it is. Only that 404 is retried (a missing Service is not)."""
    give_up = time.monotonic() + grace
    while True:
        try:
            yield from _sse_views(kube, agent, namespace, name, silence)
            return
        except kube_errors.NotFound as e:
            if not e.message.startswith("placement ") or time.monotonic() >= give_up:
                raise
            time.sleep(0.2)


def _short(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:160]


def _stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
