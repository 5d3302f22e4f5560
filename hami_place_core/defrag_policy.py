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
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hami_place_core import placement as hp
from hami_place_core.policy_fields import INT32, PolicyError
from hami_place_core.policy_fields import duration as _duration
from hami_place_core.policy_fields import integer as _int
from hami_place_core.policy_fields import mapping as _mapping
from hami_place_core.policy_lifecycle import PolicyState
from hami_place_core.schedule import ScheduleError, Window, brief_repr
from hami_place_core.selectors import matches
from hami_place_core.triggers import TRIGGERS, free_gpus, pending_pods

GROUP = "scheduling.hami.placement.com"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "HamiDefragPolicy"
PLURAL = "hamidefragpolicies"
# The placements a policy creates carry its name, so they can be listed and counted.
POLICY_LABEL = f"{GROUP}/policy"

Mode = Literal["DryRun", "Apply"]
MODES = ("DryRun", "Apply")
STATES = tuple(str(s) for s in PolicyState)  # the CRD's status.state enum
RESULTS = ("InFlight", "Succeeded", "Failed")
# A pod whose move failed is left out of plans for this long: the same pod is not retried in a loop.
FAILED_POD_COOLDOWN = dt.timedelta(hours=1)
# Kept in status.recentMoves: the per-hour budget looks back one hour; a few more entries show
# what happened just before. The CRD caps the list at 200.
RECENT_MOVES_KEPT = 200
HOUR = dt.timedelta(hours=1)
# Bounds, as the CRD states them: no huge number reaches the arithmetic, whatever the object says.
MAX_MOVES_PER_HOUR = 10_000
MAX_MOVES = 1_000  # movesPerRun, movesPerNode, movesPerWorkload
MAX_NAMESPACES = 256
MAX_MATCH_LABELS = 64
MAX_MATCH_EXPRESSIONS = 16
MAX_VALUES = 64
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# apimachinery's validation (IsDNS1123Label, IsDNS1123Subdomain, IsQualifiedName, IsValidLabelValue).
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LATEST = dt.datetime.max.replace(tzinfo=dt.UTC)


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
    triggers: Mapping[str, object]  # spec.triggers' field -> its parsed config (triggers/), in registry order
    window: Window | None
    min_interval: float
    budgets: Budgets
    namespaces: frozenset[str] | None  # None: every namespace the agent serves
    pod_selector: Mapping[str, Any] | None
    max_priority: int | None
    node_selector: Mapping[str, Any] | None
    move_strategy: str = hp.EVICT  # the strategy of every placement the policy creates

    @property
    def pending_after(self) -> float | None:
        """Seconds of the pendingPods trigger; None without one."""
        config = self.triggers.get(pending_pods.FIELD)
        return config.after if isinstance(config, pending_pods.PendingPods) else None

    @property
    def free_below(self) -> int | None:
        """The freeGPUs trigger's threshold; None without one."""
        config = self.triggers.get(free_gpus.FIELD)
        return config.below if isinstance(config, free_gpus.FreeGPUs) else None

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
def _label_key_problem(key: object) -> str:
    """Why `key` is not a Kubernetes label key ("" if it is one): an optional DNS-subdomain prefix
    and '/', then a name of 1-63 characters."""
    if not isinstance(key, str):
        return "a label key must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= 253 and _DNS_SUBDOMAIN.fullmatch(prefix)):
        return "its prefix must be a DNS subdomain of at most 253 characters, such as example.com"
    if not (len(name) <= 63 and _LABEL_NAME.fullmatch(name)):
        return "its name must be 1 to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"
    return ""


def _is_label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and (not value or bool(_LABEL_NAME.fullmatch(value)))


_LABEL_VALUE = (
    "a label value (at most 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit)"
)


def _label_key(key: object, where: str) -> None:
    problem = _label_key_problem(key)
    if problem:
        raise PolicyError(f"{where}: {brief_repr(key)} is not a label key: {problem}")


def _requirement(e: object, where: str) -> None:
    """One matchExpressions entry, as apimachinery validates a LabelSelectorRequirement."""
    if not isinstance(e, Mapping):
        raise PolicyError(f"{where} must be an object with key, operator and values")
    _label_key(e.get("key"), f"{where}.key")
    op, values = e.get("operator"), e.get("values")
    if op not in OPERATORS:
        raise PolicyError(f"{where}: unknown selector operator {brief_repr(op)} (In, NotIn, Exists or DoesNotExist)")
    if values is not None and not isinstance(values, list):
        raise PolicyError(f"{where}.values must be a list of label values")
    values = values or []
    if op in ("In", "NotIn") and not values:
        raise PolicyError(f"{where}: operator {op} needs values")
    if op in ("Exists", "DoesNotExist") and values:
        raise PolicyError(f"{where}: operator {op} takes no values")
    if len(values) > MAX_VALUES:
        raise PolicyError(f"{where}.values has {len(values)} entries; at most {MAX_VALUES}")
    for v in values:
        if not _is_label_value(v):
            raise PolicyError(f"{where}.values: {brief_repr(v)} is not {_LABEL_VALUE}")


def _selector(value: object, where: str) -> Mapping[str, Any] | None:
    if value is None:
        return None
    sel = _mapping(value, where)
    labels, exprs = sel.get("matchLabels"), sel.get("matchExpressions")
    if not labels and not exprs:
        raise PolicyError(f"{where} must set matchLabels or matchExpressions (omit it to select everything)")
    labels = _mapping(labels, f"{where}.matchLabels")
    if len(labels) > MAX_MATCH_LABELS:
        raise PolicyError(f"{where}.matchLabels has {len(labels)} entries; at most {MAX_MATCH_LABELS}")
    for k, v in labels.items():
        _label_key(k, f"{where}.matchLabels")
        if not _is_label_value(v):
            raise PolicyError(f"{where}.matchLabels[{k}]: {brief_repr(v)} is not {_LABEL_VALUE}")
    exprs = [] if exprs is None else exprs
    if not isinstance(exprs, list):
        raise PolicyError(f"{where}.matchExpressions must be a list of requirements")
    if len(exprs) > MAX_MATCH_EXPRESSIONS:
        raise PolicyError(f"{where}.matchExpressions has {len(exprs)} entries; at most {MAX_MATCH_EXPRESSIONS}")
    for i, e in enumerate(exprs):
        _requirement(e, f"{where}.matchExpressions[{i}]")
    return sel


def _window(value: object) -> Window | None:
    if value is None:
        return None
    w = _mapping(value, "spec.window")
    schedule, duration, time_zone = w.get("schedule"), w.get("duration"), w.get("timeZone")
    if not schedule or not duration:
        raise PolicyError("spec.window needs schedule and duration")
    for name, text in (("schedule", schedule), ("duration", duration), ("timeZone", time_zone)):
        if text is not None and not isinstance(text, str):
            raise PolicyError(f"spec.window.{name} must be a string, got {brief_repr(text)}")
    try:
        return Window.parse(str(schedule), str(duration), str(time_zone or "UTC"))
    except ScheduleError as e:
        raise PolicyError(f"spec.window: {e}") from None


def _triggers(spec: Mapping[str, Any]) -> Mapping[str, object]:
    """Each registered trigger's block of spec.triggers, parsed by its own module (triggers/)."""
    raw = _mapping(spec.get("triggers"), "spec.triggers")
    parsed = {
        t.field: t.parse(raw[t.field], f"spec.triggers.{t.field}") for t in TRIGGERS if raw.get(t.field) is not None
    }
    if not parsed:
        names = " or ".join(t.field for t in TRIGGERS)
        several = "(or both)" if len(TRIGGERS) == 2 else "(one or more)"
        raise PolicyError(f"spec.triggers must set {names} {several}: a policy without a trigger never acts")
    return parsed


def _namespaces(value: object) -> frozenset[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value or len(value) > MAX_NAMESPACES:
        raise PolicyError(
            f"spec.selector.namespaces must be a non-empty list of at most {MAX_NAMESPACES} namespace names"
        )
    for n in value:
        if not (isinstance(n, str) and len(n) <= 63 and _DNS_LABEL.fullmatch(n)):
            raise PolicyError(
                f"spec.selector.namespaces: {brief_repr(n)} is not a namespace name (a DNS label: at most 63 "
                "lowercase letters, digits and '-', beginning and ending with a letter or digit)"
            )
    return frozenset(value)


def _scope(spec: Mapping[str, Any]) -> tuple[frozenset[str] | None, Mapping[str, Any] | None, int | None]:
    sel = _mapping(spec.get("selector"), "spec.selector")
    namespaces = _namespaces(sel.get("namespaces"))
    max_priority = sel.get("maxPriority")
    if max_priority is not None:
        max_priority = _int(max_priority, "spec.selector.maxPriority", 0, *INT32)
    pod_selector = _selector(sel.get("podSelector"), "spec.selector.podSelector")
    if namespaces is None and pod_selector is None and max_priority is None:
        raise PolicyError(
            "spec.selector must set namespaces, podSelector or maxPriority: an empty selector would let "
            "the autopilot move any pod in the cluster"
        )
    return namespaces, pod_selector, max_priority


def _budgets(value: object) -> Budgets:
    b = _mapping(value, "spec.budgets")
    d = Budgets()
    return Budgets(
        moves_per_run=_int(b.get("movesPerRun"), "spec.budgets.movesPerRun", d.moves_per_run, 0, MAX_MOVES),
        moves_per_hour=_int(
            b.get("movesPerHour"), "spec.budgets.movesPerHour", d.moves_per_hour, 0, MAX_MOVES_PER_HOUR
        ),
        moves_per_node=_int(b.get("movesPerNode"), "spec.budgets.movesPerNode", d.moves_per_node, 0, MAX_MOVES),
        moves_per_workload=_int(
            b.get("movesPerWorkload"), "spec.budgets.movesPerWorkload", d.moves_per_workload, 0, MAX_MOVES
        ),
    )


def parse_policy(obj: Mapping[str, Any]) -> Policy:
    """The policy an object states, or PolicyError naming the first problem: never another
    exception, whatever JSON the object holds (the webhook answers 422, never 500)."""
    obj = _mapping(obj, "a HamiDefragPolicy")
    meta = _mapping(obj.get("metadata"), "metadata")
    spec = _mapping(obj.get("spec"), "spec")
    mode = spec.get("mode") or "DryRun"
    if mode not in MODES:
        raise PolicyError(f"spec.mode must be DryRun or Apply, got {brief_repr(mode)}")
    suspend = spec.get("suspend") or False
    if not isinstance(suspend, bool):
        raise PolicyError(f"spec.suspend must be true or false, got {brief_repr(suspend)}")
    triggers = _triggers(spec)
    namespaces, pod_selector, max_priority = _scope(spec)
    min_interval = _duration(spec.get("minInterval"), "spec.minInterval", 300.0)
    assert min_interval is not None
    strategy = spec.get("moveStrategy") or hp.EVICT
    if strategy not in hp.STRATEGIES:
        raise PolicyError(f"spec.moveStrategy must be Evict, Surge or Auto, got {brief_repr(strategy)}")
    generation, name = meta.get("generation"), meta.get("name")
    return Policy(
        name=name if isinstance(name, str) else "",
        generation=generation if isinstance(generation, int) else 0,
        mode="Apply" if mode == "Apply" else "DryRun",
        suspend=suspend,
        triggers=triggers,
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
        # In UTC, so no later arithmetic or formatting meets an offset past year 1 or 9999.
        return t.astimezone(dt.UTC) if t.tzinfo is not None else t.replace(tzinfo=dt.UTC)
    except (ValueError, OverflowError):
        return None


def _later(t: dt.datetime, delta: dt.timedelta) -> dt.datetime:
    """t + delta, or the end of time: a crafted startedAt of 9999-12-31 waits for ever, not crashes."""
    try:
        return t + delta
    except OverflowError:
        return _LATEST


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
        until = _later(last_hour[len(last_hour) - b.moves_per_hour], HOUR)
        return f"{len(last_hour)} moves in the last hour (movesPerHour {b.moves_per_hour})", until
    if moves and policy.min_interval > 0:
        last = max(m.started_at for m in moves)
        until = _later(last, dt.timedelta(seconds=policy.min_interval))
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
