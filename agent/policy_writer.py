"""The one writer of a HamiDefragPolicy's status, as agent/transitions.py is a placement's.

The autopilot decides and names what it observed (hami_place_core/policy_lifecycle.py ``Seen``);
this module looks up the state, the Ready condition and the Event in the lifecycle's table, sets
them with the evaluation's time, and PUTs the status with the resourceVersion the decision was made
on (a 409 means another writer moved the policy on: the caller stops). An evaluation that changes
nothing but its time stamp is not written more than once a minute.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.cache import ClusterCache
from agent.events import EventRecorder
from agent.kube import AsyncKube
from hami_place_core import defrag_policy as dp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.policy_lifecycle import Seen, announces, step
from hami_place_core.policy_status import PolicyStatus

MESSAGE_LIMIT = 1024
# lastEvaluationTime alone is refreshed at most this often (each evaluation still happens).
EVALUATION_STAMP_EVERY = dt.timedelta(seconds=60)


def policy_path(name: str, status: bool = False) -> str:
    return f"/apis/{dp.GROUP}/{dp.VERSION}/{dp.PLURAL}/{name}" + ("/status" if status else "")


class PolicyStatusWriter:
    def __init__(self, kube: AsyncKube, cache: ClusterCache, events: EventRecorder) -> None:
        self.kube, self.cache, self.events = kube, cache, events

    async def write(
        self,
        obj: dict[str, Any],
        status: PolicyStatus,
        seen: Seen,
        message: str,
        now: dt.datetime,
        event_message: str | None = None,
        plan_changed: bool = False,
    ) -> bool:
        """Write `status` as `seen` leaves it, with `message`; record the step's Event when the
        table says so (`event_message`, or the message). False when another writer came first."""
        s = step(status.state, seen)
        new = with_state(status.to_dict(), now, obj, str(s.state), message, s.ready)
        if not await self.put(obj, new):
            return False
        old_view = (status.state, status.message)
        if announces(s, old_view, (new["state"], new["message"]), plan_changed):
            await self.event(obj, s.event, event_message or message, "Warning" if s.warning else "Normal")
        return True

    async def put(self, obj: dict[str, Any], status: dict[str, Any]) -> bool:
        """PUT the status with the resourceVersion the decision was made on; False on a conflict."""
        meta = obj.get("metadata") or {}
        if unchanged(obj.get("status"), status):
            return True  # only the evaluation time moved, and not by much: spare the API server a write
        body = {
            "apiVersion": dp.API_VERSION,
            "kind": dp.KIND,
            "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")},
            "status": {k: v for k, v in status.items() if v is not None},
        }
        try:
            updated = await self.kube.request("PUT", policy_path(str(meta.get("name")), status=True), body=body)
        except kube_errors.Conflict:
            return False
        self.cache.apply("policies", {"type": "MODIFIED", "object": updated})
        return True

    async def event(self, obj: dict[str, Any], reason: str, message: str, type_: str = "Normal") -> None:
        meta = obj.get("metadata") or {}
        involved = {"apiVersion": dp.API_VERSION, "kind": dp.KIND, "name": meta.get("name"), "uid": meta.get("uid")}
        await self.events.record(involved, reason, message, type_)


# ---- the status as a value (plain functions) ------------------------------------------------------
def plan_key(plan: object) -> object:
    """A plan without its time stamp: two evaluations with this equal made the same plan."""
    if not isinstance(plan, dict):
        return None
    return {k: v for k, v in plan.items() if k != "computedAt"}


def unchanged(old: object, new: dict[str, Any]) -> bool:
    if not isinstance(old, dict):
        return False
    strip = ("lastEvaluationTime", "plan")
    if {k: v for k, v in old.items() if k not in strip} != {
        k: v for k, v in new.items() if k not in strip and v is not None
    }:
        return False
    if plan_key(old.get("plan")) != plan_key(new.get("plan")):
        return False
    before, after = dp.parse_time(old.get("lastEvaluationTime")), dp.parse_time(new.get("lastEvaluationTime"))
    return before is not None and after is not None and after - before < EVALUATION_STAMP_EVERY


def with_state(
    status: dict[str, Any], now: dt.datetime, obj: dict[str, Any], state: str, message: str, ready: bool = True
) -> dict[str, Any]:
    """The status with its state, message, evaluation time and Ready condition set."""
    out = dict(status)
    out["state"] = state
    out["message"] = message[:MESSAGE_LIMIT]
    out["lastEvaluationTime"] = dp.format_time(now)
    gen = (obj.get("metadata") or {}).get("generation")
    if isinstance(gen, int):
        out["observedGeneration"] = gen
    out["conditions"] = _conditions(status.get("conditions"), now, gen, ready, message)
    return out


def _conditions(old: object, now: dt.datetime, gen: object, ready: bool, message: str) -> list[dict[str, Any]]:
    value = "True" if ready else "False"
    conditions = old if isinstance(old, list) else []
    prev = next((c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
    since = prev.get("lastTransitionTime") if prev and prev.get("status") == value else dp.format_time(now)
    cond = {
        "type": "Ready",
        "status": value,
        "lastTransitionTime": since,
        "reason": "Evaluated" if ready else "InvalidPolicy",
        "message": "the autopilot evaluates this policy" if ready else message[:MESSAGE_LIMIT],
    }
    if isinstance(gen, int):
        cond["observedGeneration"] = gen
    return [cond]
