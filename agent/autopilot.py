"""The autopilot: acts on HamiDefragPolicies in the cluster, on the leading replica only.

Every `autopilot_interval_seconds`, and when a policy's spec or one of its moves changes, each
policy is evaluated from the live cache (agent/autopilot_plan.py decides; this module writes):

1. A move in flight (``status.inFlight``) is followed through its HamiPodPlacement: when it ends,
   the result goes to ``recentMoves``, the counters, an Event and the metrics; a pod whose move
   failed goes to ``failedPods`` and is left out of plans for an hour.
2. Otherwise the triggers are evaluated and a plan made. DryRun records it (status and, when it
   changes, an Event) and stops there. Apply also checks the window, the per-hour budget and the
   minimum interval, then starts the plan's first move.
3. A move starts by writing its intent (``inFlight`` and a ``recentMoves`` entry) to the status
   with the resourceVersion the decision was made on, and only then creating the placement (with
   evictPod) under a name derived from the policy and the pod's UID. One move never becomes two
   evictions: a leader that lost the race finds the intent and follows the placement (409 means it
   exists). Everything else (PDBs, limits, validation, crash safety of the eviction) is the
   placement's (agent/mover.py).
4. The status is not the agent's alone: whoever may write ``hamidefragpolicies/status`` can write
   an ``inFlight`` (issue 39: a forged one naming a pod in a namespace the writer could not evict
   in had the autopilot evict it). So every intent is signed (agent/intents.py: an HMAC with a key
   the replicas share, over its fields and the policy's UID), and the autopilot creates a
   placement only from a signed intent, younger than CREATE_RETRY_WINDOW, for a pod the policy
   selects, in Apply mode, under the name the intent's own fields derive. Any other intent whose
   placement does not exist is recorded as a failed move (Event IntentRefused) and nothing is
   created.

Each evaluation re-plans from the live state, so a move that failed or a cluster that changed is
simply reflected in the next plan.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from dataclasses import replace
from typing import Any

from agent import metrics
from agent.autopilot_plan import Decision, decide, surge_leaving
from agent.cache import ClusterCache
from agent.config import Settings
from agent.events import EventRecorder
from agent.intents import IntentSigner
from agent.kube import AsyncKube
from agent.leader import LeaderElector
from agent.move_placements import CREATE_RETRY_WINDOW, MovePlacements, create_retry_open, move_placement_name
from agent.policy_writer import PolicyStatusWriter, plan_key
from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.planning.model import Move, copy_state
from hami_place_core.policy_lifecycle import Seen
from hami_place_core.policy_status import InFlight, PolicyStatus

log = logging.getLogger("hami_place.agent.autopilot")

# A placement the status names but the cache has not shown yet: the create may still be on its way.
# After this long the autopilot creates it (again; 409 if it exists) from the recorded intent.
PLACEMENT_GRACE = dt.timedelta(seconds=30)
TERMINAL: dict[str, str] = {hp.COMPLETED: "Succeeded", hp.FAILED: "Failed", hp.CANCELLED: "Failed"}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


class Autopilot:
    def __init__(
        self,
        settings: Settings,
        cache: ClusterCache,
        kube: AsyncKube,
        events: EventRecorder,
        leader: LeaderElector | None = None,
    ) -> None:
        self.settings, self.cache, self.kube, self.events, self.leader = settings, cache, kube, events, leader
        self.wake = asyncio.Event()
        self.signer = IntentSigner(settings.intent_key_file)
        self.writer = PolicyStatusWriter(kube, cache, events)
        self.placements = MovePlacements(settings, cache, kube)
        cache.subscribe("policies", self._on_policy)
        cache.subscribe("placements", self._on_placement)

    # ---- what wakes an evaluation --------------------------------------------------------------
    def _on_policy(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        gen = (obj.get("metadata") or {}).get("generation")
        if kind != "MODIFIED" or gen != ((old or {}).get("metadata") or {}).get("generation"):
            self.wake.set()  # a new or changed spec; the autopilot's own status writes do not wake it

    def _on_placement(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if dp.POLICY_LABEL in ((obj.get("metadata") or {}).get("labels") or {}):
            phase = (obj.get("status") or {}).get("phase")
            if kind == "DELETED" or phase != ((old or {}).get("status") or {}).get("phase"):
                self.wake.set()

    # ---- the loop --------------------------------------------------------------------------------
    async def run(self) -> None:
        await self.cache.wait_ready(self.settings.cache_sync_timeout_seconds)
        # Without the HamiDefragPolicy CRD this waits (the informer retries and /readyz shows why).
        await self.cache.wait_synced("policies")
        while True:
            self.wake.clear()
            if self.leader is None or self.leader.is_leader:
                wanted = self.settings.policy_labels()
                for obj in self.cache.policies():
                    labels = (obj.get("metadata") or {}).get("labels") or {}
                    if all(labels.get(k) == v for k, v in wanted.items()):
                        await self._evaluate_safely(obj)
            await asyncio.sleep(0.2)  # a burst of changes makes one pass, not many
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.settings.autopilot_interval_seconds)

    async def _evaluate_safely(self, obj: dict[str, Any]) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        try:
            await self.evaluate(obj)
        except asyncio.CancelledError:
            raise
        except (kube_errors.Conflict, kube_errors.NotFound):
            pass  # the policy changed or went away under us: the next pass sees the new version
        except Exception:
            metrics.ERRORS.labels(kind="autopilot").inc()
            metrics.AUTOPILOT_EVALUATIONS.labels(policy=name, result="error").inc()
            log.exception("autopilot: evaluating policy %s failed", name)

    # ---- one evaluation --------------------------------------------------------------------------
    async def evaluate(self, obj: dict[str, Any]) -> None:
        now = _now()
        status = PolicyStatus.from_dict(obj.get("status"))
        name = str((obj.get("metadata") or {}).get("name"))
        try:
            policy = dp.parse_policy(obj)
        except dp.PolicyError as e:
            await self.writer.write(obj, status, Seen.INVALID, f"invalid policy: {e}", now)
            metrics.AUTOPILOT_EVALUATIONS.labels(policy=name, result="invalid").inc()
            return
        status = await self._settle(obj, policy, status, now)
        if status.in_flight is not None:
            await self._follow(obj, policy, status, status.in_flight, now)
            return
        if policy.suspend:
            await self.writer.write(obj, status, Seen.SUSPENDED, "spec.suspend is true: nothing is evaluated", now)
            return
        s = self.settings
        served = {
            k: pod
            for k, pod in self.cache.pods_by_key().items()
            if self.cache.serves(k.split("/", 1)[0], s.excluded_namespaces, s.namespace_labels())
        }
        # Planning takes up to a second or two of CPU on a large cluster: it runs in a thread, on a
        # copy of the state (the informers keep changing the cache's own), so the event loop keeps
        # answering admission reviews meanwhile.
        decision = await asyncio.to_thread(
            decide,
            policy,
            copy_state(self.cache.state),
            served,
            dp.cooling_pods(status.to_dict(), now),
            self.settings.excluded_namespaces,
            now,
            surge_leaving(self.cache.all_placements()),
        )
        metrics.AUTOPILOT_EVALUATIONS.labels(policy=name, result="planned" if decision.trigger else "idle").inc()
        await self._act(obj, policy, status, decision, now)

    async def _act(
        self, obj: dict[str, Any], policy: dp.Policy, status: PolicyStatus, d: Decision, now: dt.datetime
    ) -> None:
        old_plan = status.plan
        status = status.with_(trigger=d.trigger, plan=_plan_view(d, now) if d.trigger and not d.blocked else None)
        metrics.AUTOPILOT_PLAN_MOVES.labels(policy=policy.name).set(len(d.moves))
        write = self.writer.write
        if not d.trigger:
            await write(obj, status, Seen.NO_TRIGGER, "no trigger fired", now)
            return
        if d.blocked:
            await write(obj, status, Seen.NO_PLAN, d.blocked, now, event_message=f"{d.trigger}: {d.blocked}")
            return
        changed = plan_key(old_plan) != plan_key(status.plan)
        if policy.mode == "DryRun" or not (d.moves or d.pins_pending_pod):
            msg = _describe(d) + (" (DryRun: nothing is moved)" if policy.mode == "DryRun" else "")
            await write(obj, status, Seen.PLANNED, msg, now, plan_changed=changed)
            return
        if d.pins_pending_pod and d.pending is not None and not _has_controller(d.pending.pod):
            # A standalone pod is never deleted: the room is made, and HAMi places it.
            msg = f"room is made for {d.pending.key} (no controller: the scheduler places it itself)"
            await write(obj, status, Seen.PLANNED, msg, now, plan_changed=changed)
            return
        waiting = self._wait_reason(policy, status, now)
        if waiting is not None:
            seen, msg = waiting
            text = f"{_describe(d)}; waiting: {msg}"
            await write(obj, status, seen, text, now, event_message=_describe(d), plan_changed=changed)
            return
        await self._start(obj, policy, status, d, now)

    def _wait_reason(self, policy: dp.Policy, status: PolicyStatus, now: dt.datetime) -> tuple[Seen, str] | None:
        if policy.window is not None:
            is_open, when = policy.window.state(now)
            if not is_open:
                nxt = dp.format_time(when) if when else "never"
                return Seen.OUTSIDE_WINDOW, f"outside the window (next opens {nxt})"
        budget = dp.budget_wait(policy, dp.recent_moves(status.to_dict()), now)
        if budget is not None:
            why, until = budget
            return Seen.OVER_BUDGET, f"{why}; next move after {dp.format_time(until)}"
        return None

    # ---- starting a move -------------------------------------------------------------------------
    async def _start(
        self, obj: dict[str, Any], policy: dp.Policy, status: PolicyStatus, d: Decision, now: dt.datetime
    ) -> None:
        step = _next_step(d, self.cache)
        if step is None:
            await self.writer.write(obj, status, Seen.POD_GONE, "the pod to move is gone from the cache", now)
            return
        pod_key, pod_uid, node, gpus, workload = step
        started = dp.format_time(now)
        name, req_id = move_placement_name(policy.name, pod_uid, started)
        namespace = pod_key.split("/", 1)[0]
        flight = InFlight(
            placement=f"{namespace}/{name}",
            pod=pod_key,
            pod_uid=pod_uid,
            started_at=started,
            node=node,
            gpus=tuple(f"gpu-{i}" for i in gpus),
            req_id=req_id,
            workload=workload,
        )
        flight = replace(flight, signature=self.signer.sign(_uid(obj), flight.to_dict(signed=False)))
        moves = (*(status.recent_moves or ()),)[-(dp.RECENT_MOVES_KEPT - 1) :]
        entry = {"pod": pod_key, "placement": flight.placement, "startedAt": started, "result": "InFlight"}
        status = status.with_(in_flight=flight, recent_moves=(*moves, entry))
        msg = f"moving {pod_key} to {node}/{','.join(f'gpu-{i}' for i in gpus)} ({_describe(d)})"
        if not await self.writer.write(obj, status, Seen.MOVE_STARTED, msg, now):
            return  # another writer moved the policy on: no intent recorded, nothing created
        metrics.AUTOPILOT_MOVES.labels(policy=policy.name, result="started").inc()
        refused = await self.placements.create(policy, flight)
        if refused:
            await self._fail_now(policy, flight, refused)

    async def _fail_now(self, policy: dp.Policy, flight: InFlight, why: str, refused: bool = False) -> None:
        """Record a move whose placement could not be created as failed, on the latest policy.
        `refused`: an intent the autopilot would not act on; nothing was tried, so its pod is not
        kept out of plans (a forged status must not be able to shelter a pod either)."""
        obj = self.cache.policy(policy.name)
        if obj is None:
            return
        now = _now()
        status = _record_result(PolicyStatus.from_dict(obj.get("status")), flight, "Failed", why, now, cool=not refused)
        metrics.AUTOPILOT_MOVES.labels(policy=policy.name, result="failed").inc()
        seen = Seen.INTENT_REFUSED if refused else Seen.MOVE_FAILED
        event = f"{flight.pod}: {why}"
        await self.writer.write(obj, status, seen, f"move failed: {why}", now, event_message=event)

    def _refusal(self, obj: dict[str, Any], policy: dp.Policy, flight: InFlight, creating: bool) -> str:
        """Why this recorded intent is not followed ("" if it is): who wrote it is checked at
        once, what it says when its placement is to be created (`creating`)."""
        if not self.signer.verify(_uid(obj), flight.to_dict()):
            return (
                f"status.inFlight names pod {flight.pod} without the agent's signature (written by someone "
                "else, or by an agent with another intent key): nothing is created from it"
            )
        if not creating:
            return ""
        if not create_retry_open(flight, _now()):
            return f"the intent to move {flight.pod} is older than {CREATE_RETRY_WINDOW}: it is not replayed"
        pod_ns, _, pod_name = flight.pod.partition("/")
        return intent_refusal(policy, flight, self.cache.pod(pod_ns, pod_name))

    # ---- following a move --------------------------------------------------------------------------
    async def _settle(
        self, obj: dict[str, Any], policy: dp.Policy, status: PolicyStatus, now: dt.datetime
    ) -> PolicyStatus:
        """The status with a finished in-flight move recorded (and inFlight cleared)."""
        flight = status.in_flight
        if flight is None:
            return status
        result, why = self._flight_result(flight, now)
        if result is None:
            return status
        status = _record_result(status, flight, result, why, now)
        metrics.AUTOPILOT_MOVES.labels(policy=policy.name, result=result.lower()).inc()
        level = "Normal" if result == "Succeeded" else "Warning"
        await self.writer.event(obj, f"Move{result}", f"{flight.pod}: {why}", level)
        return status

    def _flight_result(self, flight: InFlight, now: dt.datetime) -> tuple[str | None, str]:
        namespace, _, name = flight.placement.partition("/")
        p = self.cache.placement(namespace, name)
        if p is not None:
            result = TERMINAL.get(str(p.phase))
            if result is not None:
                detail = p.status.message or p.status.reason or p.phase
                return result, f"placement {namespace}/{name} {p.phase}: {detail}"
            return None, ""
        started = dp.parse_time(flight.started_at) or now
        if now - started < PLACEMENT_GRACE:
            return None, ""
        return None, "recreate"

    async def _follow(
        self, obj: dict[str, Any], policy: dp.Policy, status: PolicyStatus, flight: InFlight, now: dt.datetime
    ) -> None:
        namespace, _, name = flight.placement.partition("/")
        if self.cache.placement(namespace, name) is None:
            # Recorded but never seen: a create that failed for a transient reason (retried here),
            # a leader that stopped between the intent and the create, or a forged status.
            _, why = self._flight_result(flight, now)
            refused = self._refusal(obj, policy, flight, creating=why == "recreate")
            if refused:
                await self._fail_now(policy, flight, refused, refused=True)
                return
            failed = await self.placements.create(policy, flight) if why == "recreate" else ""
            if failed:
                await self._fail_now(policy, flight, failed)
                return
        msg = f"moving {flight.pod} through placement {flight.placement}"
        await self.writer.write(obj, status, Seen.MOVE_IN_FLIGHT, msg, now)


# ---- status pieces (plain functions) -----------------------------------------------------------------
def _next_step(d: Decision, cache: ClusterCache) -> tuple[str, str, str, tuple[int, ...], str | None] | None:
    """(pod key, pod UID, node, GPUs) of what to move now: the plan's first move, or the pending
    pod itself once its room is made."""
    if d.moves:
        m: Move = d.moves[0]
        key, node, gpus = m.pod, m.to_node, m.to_gpus
    elif d.pending is not None and d.node is not None:
        key, node, gpus = d.pending.key, d.node, d.gpus
    else:
        return None
    namespace, _, name = key.partition("/")
    pod = cache.pod(namespace, name)
    if pod is None:
        return None
    return key, str((pod.get("metadata") or {}).get("uid") or ""), node, gpus, hp.workload_key(pod)


def _uid(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _has_controller(pod: Any) -> bool:
    return any(o.get("controller") for o in (pod.get("metadata") or {}).get("ownerReferences") or ())


def intent_refusal(policy: dp.Policy, flight: InFlight, pod: dict[str, Any] | None) -> str:
    """Why the autopilot must not create the placement an ``inFlight`` records, judged by what it
    says ("" if nothing is wrong with it): only a move this policy itself could have started,
    the pod it names, under the name its own fields derive. Anyone who may write the policy's
    status can write this record (docs/security.md)."""
    what = f"status.inFlight names pod {flight.pod}"
    if policy.mode != "Apply":
        return f"{what}, but the policy is in {policy.mode} mode: it moves nothing"
    if pod is None:
        return f"{what}, which is gone"
    meta = pod.get("metadata") or {}
    if not policy.selects_pod(pod):
        return f"{what}, which the policy does not select"
    uid, started = str(meta.get("uid") or ""), flight.started_at
    name, req_id = move_placement_name(policy.name, uid, started)
    if flight.pod_uid != uid or flight.placement != f"{meta.get('namespace')}/{name}":
        return f"{what}, but not the placement a move of that pod started at {started!r} creates"
    if flight.req_id != req_id or dp.parse_time(started) is None:
        return f"{what}, but its reqID or start time is not the autopilot's"
    return ""


def _record_result(
    status: PolicyStatus, flight: InFlight, result: str, why: str, now: dt.datetime, cool: bool = True
) -> PolicyStatus:
    """The status with the move's result recorded: its recentMoves entry, a counter, and (failed,
    `cool`) its pod and workload kept out of plans for FAILED_POD_COOLDOWN; inFlight cleared."""
    recent = tuple(
        {**m, "result": result} if m.get("placement") == flight.placement and m.get("result") == "InFlight" else m
        for m in status.recent_moves or ()
    )
    status = status.with_(in_flight=None, recent_moves=recent)
    if result == "Succeeded":
        status = status.with_(moves_succeeded=(status.moves_succeeded or 0) + 1)
    else:
        status = status.with_(moves_failed=(status.moves_failed or 0) + 1)
    if result == "Failed" and cool:
        failed = [f for f in status.failed_pods or () if f.get("pod") != flight.pod]
        entry = {"pod": flight.pod, "failedAt": dp.format_time(now), "reason": why[:500]}
        if flight.workload:
            entry["workload"] = flight.workload
        status = status.with_(failed_pods=(*failed, entry)[-200:])
    return status


def _plan_view(d: Decision, now: dt.datetime) -> dict[str, Any]:
    view: dict[str, Any] = {
        "moves": [
            {
                "pod": m.pod,
                "from": f"{m.from_node}/{','.join(f'gpu-{i}' for i in m.from_gpus)}",
                "to": f"{m.to_node}/{','.join(f'gpu-{i}' for i in m.to_gpus)}",
            }
            for m in d.moves[:100]
        ],
        "computedAt": dp.format_time(now),
    }
    if d.pending is not None:
        view["forPod"] = d.pending.key
        view["node"] = d.node
        view["gpus"] = [f"gpu-{i}" for i in d.gpus]
    else:
        view["gpusFreed"] = d.gpus_freed
    if d.room is not None:
        view["room"] = dict(d.room)
    return view


def _describe(d: Decision) -> str:
    if d.pending is not None:
        where = f"{d.node}/{','.join(f'gpu-{i}' for i in d.gpus)}"
        if not d.moves:
            return f"room is made for {d.pending.key} on {where}: pinning it there"
        return f"{len(d.moves)} move(s) make room for {d.pending.key} on {where}"
    return f"{len(d.moves)} move(s) free {d.gpus_freed} whole GPU(s)"
