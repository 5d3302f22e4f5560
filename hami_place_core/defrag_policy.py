"""HamiDefragPolicy: the autopilot's policy object, read once and judged the same way everywhere.

The CRD (crds/hamidefragpolicies...) checks shape; :func:`parse_policy` re-checks everything the
autopilot relies on (a crafted or older object must not crash it) and what a schema cannot say: a
cron expression that never fires, an unknown time zone, a selector that does not parse. The
validating webhook refuses a policy with the messages of :class:`PolicyError`; the autopilot skips
one it cannot read and says why in its status.

Budgets are counted from the moves the policy's status records (``status.recentMoves``), never from
memory, so a restarted agent or a new leader counts the moves the previous one made.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hami_place_core import placement as hp
from hami_place_core.schedule import ScheduleError, Window, parse_duration
from hami_place_core.selectors import SelectorError, matches

GROUP = "scheduling.hami.placement.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "HamiDefragPolicy"
PLURAL = "hamidefragpolicies"
# The placements a policy creates carry its name, so they can be listed and counted.
POLICY_LABEL = f"{GROUP}/policy"

Mode = Literal["DryRun", "Apply"]
MODES = ("DryRun", "Apply")
STATES = ("Idle", "Planned", "Moving", "WaitingForWindow", "WaitingForBudget", "Blocked", "Suspended")
RESULTS = ("InFlight", "Succeeded", "Failed")
# A pod whose move failed is left out of plans for this long: the same pod is not retried in a loop.
FAILED_POD_COOLDOWN = dt.timedelta(hours=1)
# Kept in status.recentMoves: the per-hour budget looks back one hour; a few more entries show
# what happened just before. The CRD caps the list at 200.
RECENT_MOVES_KEPT = 200
HOUR = dt.timedelta(hours=1)


class PolicyError(ValueError):
    """A policy the autopilot cannot follow; the message names the field and the problem."""


@dataclass(frozen=True)
class Budgets:
    moves_per_run: int = 5
    moves_per_hour: int = 10
    moves_per_node: int = 2
    moves_per_workload: int = 1


@dataclass(frozen=True)
class Policy:
    name: str
    generation: int
    mode: Mode
    suspend: bool
    pending_after: float | None  # seconds; None: no pendingPods trigger
    free_below: int | None  # None: no freeGPUs trigger
    window: Window | None
    min_interval: float
    budgets: Budgets
    namespaces: frozenset[str] | None  # None: every namespace the agent serves
    pod_selector: Mapping[str, Any] | None
    max_priority: int | None
    node_selector: Mapping[str, Any] | None
    move_strategy: str = hp.EVICT  # the strategy of every placement the policy creates

    def selects_pod(self, pod: Mapping[str, Any]) -> bool:
        """May the autopilot move this pod (or make room for it)?"""
        meta = pod.get("metadata") or {}
        if self.namespaces is not None and meta.get("namespace") not in self.namespaces:
            return False
        if self.pod_selector is not None and not matches(self.pod_selector, meta.get("labels") or {}):
            return False
        if self.max_priority is not None:
            priority = (pod.get("spec") or {}).get("priority")
            if (priority if isinstance(priority, int) else 0) > self.max_priority:
                return False
        return True

    def selects_node(self, labels: Mapping[str, str]) -> bool:
        return self.node_selector is None or matches(self.node_selector, labels)


# ---- parsing ----------------------------------------------------------------------------------------
def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{where} must be an object")
    return value


def _int(value: object, where: str, default: int, low: int = 0) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        raise PolicyError(f"{where} must be an integer, got {value!r}")
    if value < low:
        raise PolicyError(f"{where} must be at least {low}, got {value}")
    return value


def _duration(value: object, where: str, default: float | None) -> float | None:
    if value is None:
        return default
    try:
        return parse_duration(str(value))
    except ScheduleError as e:
        raise PolicyError(f"{where}: {e}") from None


def _selector(value: object, where: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    sel = _mapping(value, where)
    if not sel.get("matchLabels") and not sel.get("matchExpressions"):
        raise PolicyError(f"{where} must set matchLabels or matchExpressions (omit it to select everything)")
    labels = sel.get("matchLabels") or {}
    exprs = sel.get("matchExpressions") or []
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise PolicyError(f"{where}.matchLabels must map label keys to strings")
    if not isinstance(exprs, list) or not all(isinstance(e, Mapping) for e in exprs):
        raise PolicyError(f"{where}.matchExpressions must be a list of requirements")
    for i, e in enumerate(exprs):
        try:
            matches({"matchExpressions": [e]}, {})  # an unknown operator raises here
        except SelectorError as err:
            raise PolicyError(f"{where}.matchExpressions[{i}]: {err}") from None
        if e.get("operator") in ("In", "NotIn") and not e.get("values"):
            raise PolicyError(f"{where}.matchExpressions[{i}]: operator {e['operator']} needs values")
    return sel


def _window(value: object) -> Window | None:
    if value is None:
        return None
    w = _mapping(value, "spec.window")
    if not w.get("schedule") or not w.get("duration"):
        raise PolicyError("spec.window needs schedule and duration")
    try:
        return Window.parse(str(w["schedule"]), str(w["duration"]), str(w.get("timeZone") or "UTC"))
    except ScheduleError as e:
        raise PolicyError(f"spec.window: {e}") from None


def _triggers(spec: Mapping[str, Any]) -> tuple[float | None, int | None]:
    triggers = _mapping(spec.get("triggers"), "spec.triggers")
    pending = triggers.get("pendingPods")
    after = None
    if pending is not None:
        after = _duration(
            _mapping(pending, "spec.triggers.pendingPods").get("after"), "spec.triggers.pendingPods.after", None
        )
        if after is None:
            raise PolicyError("spec.triggers.pendingPods.after is required (e.g. 5m)")
    free = triggers.get("freeGPUs")
    below = None
    if free is not None:
        below = _int(_mapping(free, "spec.triggers.freeGPUs").get("below"), "spec.triggers.freeGPUs.below", 0, 1)
        if below == 0:
            raise PolicyError("spec.triggers.freeGPUs.below is required (at least 1)")
    if after is None and below is None:
        raise PolicyError(
            "spec.triggers must set pendingPods or freeGPUs (or both): a policy without a trigger never acts"
        )
    return after, below


def _scope(spec: Mapping[str, Any]) -> tuple[frozenset[str] | None, Mapping[str, Any] | None, int | None]:
    sel = _mapping(spec.get("selector"), "spec.selector")
    namespaces = sel.get("namespaces")
    if namespaces is not None and (
        not isinstance(namespaces, list) or not namespaces or not all(isinstance(n, str) and n for n in namespaces)
    ):
        raise PolicyError("spec.selector.namespaces must be a non-empty list of namespace names")
    max_priority = sel.get("maxPriority")
    if max_priority is not None and (not isinstance(max_priority, int) or isinstance(max_priority, bool)):
        raise PolicyError(f"spec.selector.maxPriority must be an integer, got {max_priority!r}")
    pod_selector = _selector(sel.get("podSelector"), "spec.selector.podSelector")
    if namespaces is None and pod_selector is None and max_priority is None:
        raise PolicyError(
            "spec.selector must set namespaces, podSelector or maxPriority: an empty selector would let "
            "the autopilot move any pod in the cluster"
        )
    return (frozenset(namespaces) if namespaces is not None else None), pod_selector, max_priority


def _budgets(value: object) -> Budgets:
    b = _mapping(value, "spec.budgets")
    d = Budgets()
    return Budgets(
        moves_per_run=_int(b.get("movesPerRun"), "spec.budgets.movesPerRun", d.moves_per_run),
        moves_per_hour=_int(b.get("movesPerHour"), "spec.budgets.movesPerHour", d.moves_per_hour),
        moves_per_node=_int(b.get("movesPerNode"), "spec.budgets.movesPerNode", d.moves_per_node),
        moves_per_workload=_int(b.get("movesPerWorkload"), "spec.budgets.movesPerWorkload", d.moves_per_workload),
    )


def parse_policy(obj: Mapping[str, Any]) -> Policy:
    """The policy an object states, or PolicyError naming the first problem."""
    meta = _mapping(obj.get("metadata"), "metadata")
    spec = _mapping(obj.get("spec"), "spec")
    mode = spec.get("mode") or "DryRun"
    if mode not in MODES:
        raise PolicyError(f"spec.mode must be DryRun or Apply, got {mode!r}")
    suspend = spec.get("suspend") or False
    if not isinstance(suspend, bool):
        raise PolicyError(f"spec.suspend must be true or false, got {suspend!r}")
    after, below = _triggers(spec)
    namespaces, pod_selector, max_priority = _scope(spec)
    min_interval = _duration(spec.get("minInterval"), "spec.minInterval", 300.0)
    assert min_interval is not None
    strategy = spec.get("moveStrategy") or hp.EVICT
    if strategy not in hp.STRATEGIES:
        raise PolicyError(f"spec.moveStrategy must be Evict, Surge or Auto, got {strategy!r}")
    generation = meta.get("generation")
    return Policy(
        name=str(meta.get("name") or ""),
        generation=generation if isinstance(generation, int) else 0,
        mode="Apply" if mode == "Apply" else "DryRun",
        suspend=suspend,
        pending_after=after,
        free_below=below,
        window=_window(spec.get("window")),
        min_interval=min_interval,
        budgets=_budgets(spec.get("budgets")),
        namespaces=namespaces,
        pod_selector=pod_selector,
        max_priority=max_priority,
        node_selector=_selector(spec.get("nodeSelector"), "spec.nodeSelector"),
        move_strategy=str(strategy),
    )


# ---- budgets ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RecentMove:
    pod: str
    placement: str
    started_at: dt.datetime
    result: str


def parse_time(value: object) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)


def format_time(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def recent_moves(status: Mapping[str, Any] | None) -> list[RecentMove]:
    """status.recentMoves as typed entries; entries that do not parse are dropped (they count for
    nothing: a crafted status cannot block or unblock the budgets by malformed entries)."""
    out = []
    for m in (status or {}).get("recentMoves") or ():
        if not isinstance(m, Mapping):
            continue
        started = parse_time(m.get("startedAt"))
        if started is None or not isinstance(m.get("pod"), str):
            continue
        result = m.get("result") if m.get("result") in RESULTS else "InFlight"
        out.append(RecentMove(m["pod"], str(m.get("placement") or ""), started, str(result)))
    return out


def budget_wait(policy: Policy, moves: Sequence[RecentMove], now: dt.datetime) -> tuple[str, dt.datetime] | None:
    """Why the next move must wait and until when, or None if the budgets and the minimum interval
    allow a move now. A budget of 0 waits for ever (until the policy changes): the time is `now`."""
    b = policy.budgets
    if b.moves_per_run == 0 or b.moves_per_hour == 0:
        return "a budget of 0 moves stops the autopilot's moves", now
    last_hour = sorted(m.started_at for m in moves if m.started_at > now - HOUR)
    if len(last_hour) >= b.moves_per_hour:
        until = last_hour[len(last_hour) - b.moves_per_hour] + HOUR
        return f"{len(last_hour)} moves in the last hour (movesPerHour {b.moves_per_hour})", until
    if moves and policy.min_interval > 0:
        last = max(m.started_at for m in moves)
        until = last + dt.timedelta(seconds=policy.min_interval)
        if until > now:
            return f"the last move started at {format_time(last)} (minInterval {policy.min_interval:g}s)", until
    return None


def cooling_pods(status: Mapping[str, Any] | None, now: dt.datetime) -> dict[str, str]:
    """Pods (namespace/name) and workloads (namespace/Kind/name) whose move failed within
    FAILED_POD_COOLDOWN, with why: a failed pod's replacement has a new name but the same workload,
    and must not be tried again either."""
    out = {}
    for f in (status or {}).get("failedPods") or ():
        if not isinstance(f, Mapping) or not isinstance(f.get("pod"), str):
            continue
        at = parse_time(f.get("failedAt"))
        if at is not None and now - at < FAILED_POD_COOLDOWN:
            out[f["pod"]] = str(f.get("reason") or "")
            if isinstance(f.get("workload"), str) and f["workload"]:
                out[f["workload"]] = out[f["pod"]]
    return out
