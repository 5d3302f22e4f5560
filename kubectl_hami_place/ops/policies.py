"""`policies`: the autopilot's HamiDefragPolicies and what they are doing.

Reads the cluster-scoped policies from the API server (no agent needed): the list shows each
policy's mode, state, trigger, current plan, moves and last evaluation; `policies NAME` shows one
in detail (the plan's moves, the move in flight, recent moves, pods left out after a failed move,
conditions). `-w` follows changes through a watch, as `status -w` does.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from hami_place_core import defrag_policy as dp
from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops.args import ListOptions
from kubectl_hami_place.ops.cluster import connect
from kubectl_hami_place.ops.status import age
from kubectl_hami_place.options import jsonpath_of
from kubectl_hami_place.printers import is_structured, object_name, print_structured, sort_items, structured_text

POLICIES_PATH = f"/apis/{dp.GROUP}/{dp.VERSION}/{dp.PLURAL}"
CRD_NAME = f"{dp.PLURAL}.{dp.GROUP}"
CRD_MISSING = (
    f"the HamiDefragPolicy CRD ({CRD_NAME}) is not installed in this cluster: "
    "install the hami-place chart, or kubectl apply -f crds/"
)
RESOURCE = f"{dp.KIND.lower()}.{dp.GROUP}"  # -o name: hamidefragpolicy.scheduling.hami.placement.com/NAME
CELL = 60  # a table cell longer than this is cut (-o wide, json and the detail view show it all)


# ---- pure rendering -------------------------------------------------------------------------------
def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _cut(text: str, width: int = CELL) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def plan_summary(plan: object) -> str:
    """One line for status.plan: "3 moves for ml/train-0 -> node-a/gpu-0,gpu-1", "2 moves free 2
    GPUs", or "-" when there is no plan."""
    if not isinstance(plan, dict):
        return "-"
    moves = _plural(len(plan.get("moves") or []), "move")
    if plan.get("forPod"):
        where = f"{plan.get('node') or '?'}/{','.join(plan.get('gpus') or []) or '?'}"
        return f"{moves} for {plan['forPod']} -> {where}"
    return f"{moves} free {_plural(int(plan.get('gpusFreed') or 0), 'GPU')}"


def policy_view(obj: dict[str, Any]) -> dict[str, Any]:
    """The flat view of one policy that -o json/yaml print (its spec and status included)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    return {
        "name": (obj.get("metadata") or {}).get("name"),
        "mode": spec.get("mode") or "DryRun",
        "suspend": bool(spec.get("suspend")),
        "state": status.get("state"),
        "trigger": status.get("trigger"),
        "plan": plan_summary(status.get("plan")) if status.get("plan") else None,
        "movesSucceeded": int(status.get("movesSucceeded") or 0),
        "movesFailed": int(status.get("movesFailed") or 0),
        "lastEvaluationTime": status.get("lastEvaluationTime"),
        "message": status.get("message"),
        "spec": spec,
        "status": status,
    }


def headers(wide: bool) -> list[str]:
    return ["NAME", "MODE", "STATE", "TRIGGER", "PLAN", "MOVES", "LAST-EVAL"] + (["MESSAGE"] if wide else [])


def row(obj: dict[str, Any], wide: bool, now: datetime | None = None) -> list[str]:
    v = policy_view(obj)
    cut = (lambda s: s) if wide else _cut
    out = [
        str(v["name"]),
        str(v["mode"]),
        str(v["state"] or "-"),
        cut(str(v["trigger"] or "-")),
        cut(v["plan"] or "-"),
        f"{v['movesSucceeded']}/{v['movesFailed']}",
        age(v["lastEvaluationTime"], now) if v["lastEvaluationTime"] else "-",
    ]
    if wide:
        out.append(str(v["message"] or "")[:200])
    return out


def _fmt(rows: list[list[str]], head: list[str] | None) -> str:
    from tabulate import tabulate  # only for a table: an empty list, -o json/yaml/name never pay for it

    return tabulate(rows, headers=head or (), tablefmt="plain", disable_numparse=True)


def table(items: list[dict[str, Any]], wide: bool, no_headers: bool = False, now: datetime | None = None) -> str:
    """The policies list: a row per policy, under the column headers unless --no-headers."""
    return _fmt([row(o, wide, now) for o in items], None if no_headers else headers(wide))


def names(items: list[dict[str, Any]]) -> str:
    """-o name: hamidefragpolicy.scheduling.hami.placement.com/NAME, one per line, as kubectl prints it."""
    return "\n".join(object_name(RESOURCE, o) for o in items)


def _selector_text(sel: object) -> str:
    if not isinstance(sel, dict):
        return "-"
    parts = [f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items())]
    for e in sel.get("matchExpressions") or []:
        values = f" ({','.join(e.get('values') or [])})" if e.get("values") else ""
        parts.append(f"{e.get('key')} {e.get('operator')}{values}")
    return ", ".join(parts) or "-"


def _spec_lines(spec: dict[str, Any]) -> list[tuple[str, str]]:
    triggers = spec.get("triggers") or {}
    fired = []
    if "pendingPods" in triggers:
        fired.append(f"GPU pods pending for {triggers['pendingPods'].get('after')}")
    if "freeGPUs" in triggers:
        fired.append(f"fewer than {triggers['freeGPUs'].get('below')} whole GPUs free")
    sel = spec.get("selector") or {}
    scope = [f"namespaces {', '.join(sel['namespaces'])}" if sel.get("namespaces") else "every served namespace"]
    if sel.get("podSelector"):
        scope.append(f"pods {_selector_text(sel['podSelector'])}")
    if sel.get("maxPriority") is not None:
        scope.append(f"priority at most {sel['maxPriority']}")
    window = spec.get("window")
    when = (
        f"{window.get('schedule')} for {window.get('duration')} ({window.get('timeZone') or 'UTC'})"
        if isinstance(window, dict)
        else "any time (no window)"
    )
    b = spec.get("budgets") or {}
    budgets = (
        f"{b.get('movesPerRun', 5)} per run, {b.get('movesPerHour', 10)} per hour, "
        f"{b.get('movesPerNode', 2)} per node, {b.get('movesPerWorkload', 1)} per workload; "
        f"min interval {spec.get('minInterval') or '5m'}"
    )
    nodes = _selector_text(spec["nodeSelector"]) if spec.get("nodeSelector") else "every HAMi node"
    return [
        ("Triggers", " or ".join(fired) or "-"),
        ("May move", "; ".join(scope)),
        ("Nodes", nodes),
        ("Window", when),
        ("Budgets", budgets),
        ("Moves as", _STRATEGY_TEXT.get(str(spec.get("moveStrategy") or "Evict"), str(spec.get("moveStrategy")))),
    ]


_STRATEGY_TEXT = {
    "Evict": "Evict (the pod is evicted; its controller recreates it on the target)",
    "Surge": "Surge (one more replica on the target first; only Deployment/ReplicaSet pods)",
    "Auto": "Auto (Surge where it is safe, Evict otherwise)",
}


def _when(value: object, now: datetime | None) -> str:
    return f"{age(str(value), now)} ago ({value})" if value else "never"


def _section(title: str, rows: list[list[str]], head: list[str]) -> str:
    return f"{title}\n" + "\n".join("  " + line for line in _fmt(rows, head).splitlines())


def detail(obj: dict[str, Any], now: datetime | None = None) -> str:
    """`policies NAME`: the policy, its plan, the move in flight, recent moves, failed pods and
    conditions, as blocks separated by blank lines."""
    v, status = policy_view(obj), obj.get("status") or {}
    mode = v["mode"] + (" (suspended)" if v["suspend"] else "")
    mode += "  (evicts pods on its own)" if v["mode"] == "Apply" else "  (plans and records only)"
    head = [
        ("Name", str(v["name"])),
        ("Mode", mode),
        ("State", str(v["state"] or "- (not evaluated yet)")),
        ("Message", str(v["message"] or "-")),
        ("Trigger", str(v["trigger"] or "-")),
        ("Last evaluation", _when(v["lastEvaluationTime"], now)),
        ("Moves", f"{v['movesSucceeded']} succeeded, {v['movesFailed']} failed"),
        *_spec_lines(v["spec"]),
    ]
    blocks = ["\n".join(f"{k + ':':<17}{val}" for k, val in head)]
    plan = status.get("plan")
    if isinstance(plan, dict):
        computed = f" (computed {age(str(plan['computedAt']), now)} ago)" if plan.get("computedAt") else ""
        title = f"Plan: {plan_summary(plan)}{computed}"
        moves = [
            [str(i), m.get("pod", "?"), m.get("from", "?"), m.get("to", "?")]
            for i, m in enumerate(plan.get("moves") or [], 1)
        ]
        blocks.append(_section(title, moves, ["#", "POD", "FROM", "TO"]) if moves else title)
    else:
        blocks.append("Plan: none")
    flight = status.get("inFlight")
    if isinstance(flight, dict):
        where = f"{flight.get('node')}/{','.join(flight.get('gpus') or [])}"
        blocks.append(
            f"In flight: {flight.get('pod')} -> {where} through placement {flight.get('placement')}, "
            f"started {_when(flight.get('startedAt'), now)}"
        )
    recent = [
        [age(m.get("startedAt"), now), m.get("pod", "?"), m.get("placement", "?"), m.get("result", "?")]
        for m in reversed(status.get("recentMoves") or [])
        if isinstance(m, dict)
    ]
    if recent:
        blocks.append(_section("Recent moves (newest first):", recent, ["AGE", "POD", "PLACEMENT", "RESULT"]))
    failed = [
        [f.get("pod", "?"), age(f.get("failedAt"), now), f.get("reason", "")]
        for f in status.get("failedPods") or []
        if isinstance(f, dict)
    ]
    if failed:
        blocks.append(_section("Failed pods (left out of plans for an hour):", failed, ["POD", "AGE", "REASON"]))
    conditions = [
        [
            c.get("type", "?"),
            c.get("status", "?"),
            c.get("reason", ""),
            age(c.get("lastTransitionTime"), now),
            c.get("message", ""),
        ]
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    ]
    if conditions:
        blocks.append(_section("Conditions:", conditions, ["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"]))
    return "\n\n".join(blocks)


# ---- the command ----------------------------------------------------------------------------------
def _list(kube: Kube, query: dict[str, Any]) -> dict[str, Any]:
    try:
        return dict(kube.request("GET", POLICIES_PATH, query))
    except kube_errors.NotFound as e:  # the collection itself is missing: no CRD
        raise UserError(CRD_MISSING) from e


def policies(options: ListOptions) -> None:
    """The policies: a table, the detail of one, a document, names, or (-w) a row per change."""
    name, output = options.name, options.output
    kube = connect(options.kube)
    query: dict[str, Any] = {"labelSelector": options.selector}
    if name:
        query["fieldSelector"] = f"metadata.name={name}"
    listing = _list(kube, query)
    items = sort_items(
        sorted(listing.get("items") or [], key=lambda o: str(o["metadata"]["name"])), options.sort_by, policy_view
    )
    if name and not items:
        raise UserError(f"policy {name} not found")
    if options.watch:
        rv = listing["metadata"]["resourceVersion"]
        _watch(kube, query, items, rv, output, bool(name), options.no_headers)
    elif is_structured(output):
        views = [policy_view(o) for o in items]
        print_structured(views[0] if name else {"items": views, "count": len(views)}, output)
    elif output == "name":
        if items:
            click.echo(names(items))
    elif name:
        click.echo(detail(items[0]))
    elif not items:
        click.echo("no HamiDefragPolicies in the cluster", err=True)
    else:
        click.echo(table(items, output == "wide", options.no_headers))


def _watch(
    kube: Kube,
    query: dict[str, Any],
    items: list[dict[str, Any]],
    rv: str,
    output: str,
    single: bool,
    no_headers: bool = False,
) -> None:
    wide = output == "wide"
    header_shown = no_headers

    def emit(obj: dict[str, Any]) -> None:
        nonlocal header_shown
        if output in ("json", "yaml"):
            click.echo(json.dumps(policy_view(obj)))
        elif jsonpath_of(output) is not None:
            click.echo(structured_text(policy_view(obj), output))
        elif output == "name":
            click.echo(object_name(RESOURCE, obj))
        elif single:
            click.echo(f"--- {datetime.now(UTC).strftime('%H:%M:%S')}\n{detail(obj)}\n")
        else:
            click.echo(_fmt([row(obj, wide)], None if header_shown else headers(wide)))
            header_shown = True

    for obj in items:
        emit(obj)
    while True:  # a server-side watch timeout or a 410 just resumes
        try:
            for ev in kube.watch(POLICIES_PATH, {**query, "resourceVersion": rv, "allowWatchBookmarks": "true"}):
                obj = ev.get("object") or {}
                rv = obj.get("metadata", {}).get("resourceVersion") or rv
                if ev.get("type") == "BOOKMARK":
                    continue
                if ev.get("type") == "DELETED":
                    click.echo(f"{obj['metadata']['name']} deleted")
                    if single:
                        return
                    continue
                emit(obj)
        except kube_errors.Gone:  # too old: list again, print nothing twice
            rv = _list(kube, {**query, "limit": 1})["metadata"]["resourceVersion"]
