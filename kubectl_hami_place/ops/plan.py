"""`plan`: the moves that would defragment the cluster, or make room for one pod, changing
nothing; as a table, a document, or one HamiPodPlacement per move (-o yaml)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

import click
import yaml
from tabulate import tabulate

from hami_place_core import capacity, planning
from hami_place_core import placement as hp
from hami_place_core.examples import resolve_snapshot
from hami_place_core.pending import pending_gpu_pods
from hami_place_core.planning import Move, Plan, SolverUnavailable
from hami_place_core.planning import PlanOptions as PlannerOptions
from hami_place_core.planning.planner import TOO_LARGE
from hami_place_core.planning.room import RoomPlan, make_room
from hami_place_core.snapshot import load_snapshot
from hami_place_core.state import ClusterState, build_state
from hami_place_core.targets import TargetError
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops import report
from kubectl_hami_place.ops.args import PlanOptions
from kubectl_hami_place.ops.cluster import connect, load_cluster, warn_unreadable
from kubectl_hami_place.ops.gang_room import gang_doc, gang_requests, is_gang, plan_gang, render_gang
from kubectl_hami_place.ops.moves import describe_move, namespace_only
from kubectl_hami_place.ops.progress import Progress
from kubectl_hami_place.ops.render import before_after, demand_line
from kubectl_hami_place.ops.room import headline, no_room, render_room, room_doc, room_request
from kubectl_hami_place.ops.workloads import controller_of
from kubectl_hami_place.printers import counted, is_structured, print_structured
from kubectl_hami_place.quiet import stdout_to_stderr

# -o json's apiVersion and kind: a client-side document (no such object exists in the cluster)
PLAN_API_VERSION = "scheduling.hami.placement.com/v1"
PLAN_KIND = "HamiPlacementPlan"
ROOM_KIND = "HamiRoomPlan"  # plan --for / --for-request
CREATED_BY = "kubectl-hami-place-plan"
PLAN_ANNOTATION = "scheduling.hami.placement.com/plan"
STEP_ANNOTATION = "scheduling.hami.placement.com/plan-step"


def _write_report(path: str, state: ClusterState, planned: Plan, source: str) -> None:
    """The before/after picture (ops/report.py); the command's callback checked the extension."""
    report.write(path, report.build(state, planned, source, report.report_format(path) or "html"))


def _read(
    options: PlanOptions, progress: Progress
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str, Kube | None]:
    """The raw nodes and pods, where they came from, and the client (None from a snapshot)."""
    if options.snapshot:
        raw_nodes, raw_pods, meta = load_snapshot(resolve_snapshot(options.snapshot))
        return raw_nodes, raw_pods, f"snapshot {options.snapshot} ({meta.get('source', 'unknown source')})", None
    kube = connect(options.kube)
    raw_nodes, raw_pods = load_cluster(kube, options.selector, progress.start)
    return raw_nodes, raw_pods, kube.server, kube


def _planner_options(options: PlanOptions, state: ClusterState, pods: list[dict[str, Any]]) -> PlannerOptions:
    k, flags = options.kube, options.planner
    # -n without --for: only that namespace's pods move (with --for it is the pod's namespace).
    scope = k.namespace if not k.all_namespaces and not options.for_one_pod else None
    return PlannerOptions(
        kept_pods=namespace_only(state.pods, scope),
        objective=flags.objective,  # type: ignore[arg-type]
        max_moves=options.max_moves,
        excluded_namespaces=frozenset({"kube-system", *flags.excluded}),
        max_moves_per_workload=flags.max_moves_per_workload,
        max_moves_per_gpu=options.max_moves_per_gpu,
        solver=flags.solver,  # type: ignore[arg-type]
        demand=demand_for(state, pods, flags.demand),
    )


def plan(options: PlanOptions) -> None:
    """The plan (or with --for/--for-request the room plan), printed as -o asks."""
    if options.snapshot and options.selector:
        raise click.UsageError("-l/--selector cannot be combined with --snapshot")
    if options.report and options.for_one_pod:
        raise click.UsageError("--report draws a defragmentation plan: it cannot be combined with --for/--for-request")
    # On a terminal, a progress line on stderr once this takes over a second. From the live
    # cluster it starts once the nodes are read: an exec plugin may need the terminal to log in.
    snapshot = bool(options.snapshot)
    progress = Progress("reading the snapshot" if snapshot else "reading the cluster", started=snapshot)
    with progress:
        raw_nodes, raw_pods, source, kube = _read(options, progress)
        progress.label = "planning"
        state = build_state(raw_nodes, raw_pods)
        if is_gang(options.for_pod, options.for_request):
            _print_gang(options, state, kube, raw_pods, source)
            return
        with stdout_to_stderr():  # a solver's banner must not reach `-o json | jq`
            planner = _planner_options(options, state, raw_pods)
            planned = _room(state, planner, kube, options) if options.for_one_pod else _compute(state, planner)
    if isinstance(planned, RoomPlan):
        _print_room(planned, state, source, options.output, kube, raw_pods)
        return
    warn_unreadable(state)  # once the command is sure to answer: an error stays one line
    if options.report:  # before the output: a report that cannot be written fails the command (exit 1)
        _write_report(options.report, state, planned, source)
    if options.output == "yaml":
        _print_manifests(planned, raw_pods, kube)
    elif is_structured(options.output):
        print_structured(plan_doc(planned, source), options.output)
    else:
        click.echo(render_plan(planned, source, options.max_rows))


def _print_gang(
    options: PlanOptions, state: ClusterState, kube: Kube | None, pods: list[dict[str, Any]], source: str
) -> None:
    """`plan --for KIND/NAME` or `--for-request ...,pods=N`: room for every member at once."""
    what, requests = gang_requests(kube, options.for_pod, options.for_request, pods)
    with stdout_to_stderr():  # a solver's banner must not reach `-o json | jq`
        room = plan_gang(state, what, requests, _planner_options(options, state, pods))
    warn_unreadable(state)
    if is_structured(options.output) or options.output == "yaml":
        print_structured({"apiVersion": PLAN_API_VERSION, **gang_doc(room, what, source)}, options.output)
    else:
        click.echo(render_gang(room, what, source))


def _room(state: ClusterState, planner: PlannerOptions, kube: Kube | None, options: PlanOptions) -> RoomPlan:
    """With --for/--for-request: the fewest moves after which the pod fits (exit 1 when none does)."""
    request, _ = room_request(kube, options.for_pod, options.for_request)
    room = make_room(state, request, planner)
    if not room.ok:
        raise no_room(room)
    return room


def _compute(state: ClusterState, options: PlannerOptions) -> Plan:
    """The plan (exit 1 when the solver asked for is missing)."""
    try:
        result = planning.plan(state, options)  # through the package, where a test may wrap it
    except SolverUnavailable as e:
        raise UserError(str(e)) from e
    warn_if_exact_skipped(options.solver, result.solver_note)
    return result


def demand_for(state: ClusterState, pods: list[dict[str, Any]], given: capacity.Demand | None) -> capacity.Demand:
    """What the plan makes room for and reports: --demand when given, else the GPU pods the
    scheduler could not place (HAMi's reasons), else the running mix."""
    waiting = [p.pod for p in pending_gpu_pods(pods, dt.datetime.now(dt.UTC), 0)]
    return capacity.choose_demand(state, waiting, given)


def warn_if_exact_skipped(solver: str, note: str) -> None:
    """--solver exact asked for by name, and the state was too large for it: the plan is the
    greedy planner's. Said on stderr too (the note alone is easy to miss, and absent from yaml)."""
    if solver == "exact" and note.startswith(TOO_LARGE):
        click.echo(
            f"warning: --solver exact: {note.removeprefix('exact planner: ')}; the plan is the greedy planner's",
            err=True,
        )


def plan_doc(result: Plan, source: str) -> dict[str, Any]:
    """-o json (and jsonpath's input): the plan, as a document with kubectl's apiVersion and kind."""
    return {"apiVersion": PLAN_API_VERSION, "kind": PLAN_KIND, "source": source, **result.as_dict()}


def _print_manifests(result: Plan, raw_pods: list[dict[str, Any]], kube: Kube | None) -> None:
    """-o yaml: one HamiPodPlacement per move, in order."""
    pods = {
        f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}": p for p in raw_pods
    }
    docs = placements(result, pods, kube)
    if not docs:
        click.echo(f"# no moves: {_headline(result)}")
        return
    parts = [f"# {_headline(result)}\n# Apply one at a time, in order, each after the one before is Completed."]
    room = demand_line(result)
    if room:
        parts[0] += f"\n# {room}"
    early = stopping_line(result)
    if early:
        parts[0] += f"\n# {early}"
    for i, (m, doc) in enumerate(zip(result.moves, docs, strict=True), start=1):
        parts.append(f"---\n# {i}. {describe_move(m)}\n" + yaml.safe_dump(doc, sort_keys=False).rstrip())
    click.echo("\n".join(parts))


def _print_room(
    room: RoomPlan, state: ClusterState, source: str, output: str, kube: Kube | None, raw_pods: list[dict[str, Any]]
) -> None:
    """`plan --for/--for-request`: the fewest moves after which the pod fits."""
    warn_unreadable(state)
    if output == "yaml":
        pods = {f"{p['metadata'].get('namespace')}/{p['metadata'].get('name')}": p for p in raw_pods}
        parts = [f"# {headline(room)}\n# Apply one at a time, in order, each after the one before is Completed."]
        for i, (m, doc) in enumerate(zip(room.moves, placements(room, pods, kube), strict=True), start=1):
            parts.append(f"---\n# {i}. {describe_move(m)}\n" + _yaml(doc))
        click.echo("\n".join(parts))
    elif is_structured(output):
        print_structured({"apiVersion": PLAN_API_VERSION, "kind": ROOM_KIND, **room_doc(room, source)}, output)
    else:
        click.echo(render_room(room, source))


def _yaml(doc: dict[str, Any]) -> str:
    return str(yaml.safe_dump(doc, sort_keys=False)).rstrip()


def _headline(result: Plan) -> str:
    return (
        f"plan ({result.objective}): {counted(len(result.moves), 'move')}; "
        f"whole GPUs free {result.before.whole_free} -> {result.after.whole_free}, "
        f"FGD {result.before.fgd:.2f} -> {result.after.fgd:.2f}"
    )


def stopping_line(result: Plan) -> str | None:
    """Where the plan's gain comes from: the last moves buy the least (see Plan.stopping_points)."""
    points = result.stopping_points()
    if len(points) < 2:
        return None
    (n0, k0), *rest = points[:-1]
    steps = "".join(f", {n} free {k}" for n, k in rest)
    n, k = points[-1]
    return (
        "stopping early (every prefix of the plan is a valid plan): "
        f"the first {counted(n0, 'move')} free {counted(k0, 'GPU')}{steps}; all {n} free {k}"
    )


def _move_row(i: int, m: Move) -> tuple[object, ...]:
    return (
        i,
        m.pod,
        f"{m.from_node} {','.join(f'gpu-{g}' for g in m.from_gpus)}",
        f"{m.to_node} {','.join(m.gpu_devices)}",
        m.reason + (" (frees it)" if m.frees else "") + (f" (takes {', '.join(m.takes)})" if m.takes else ""),
    )


def moves_table(moves: list[Move], max_rows: int | None = None) -> str:
    """The moves, one row each; with `max_rows`, a long plan shows its first and last moves and says
    in a line of its own how many it leaves out between them (never a silent cut)."""
    numbered = list(enumerate(moves, start=1))
    if max_rows is None or len(numbered) <= max_rows:
        head, tail = numbered, []
    else:
        head, tail = numbered[: (max_rows + 1) // 2], numbered[len(numbered) - max_rows // 2 :]
    rows = [_move_row(i, m) for i, m in head + tail]
    lines = tabulate(rows, headers=["#", "POD", "FROM", "TO", "WHY"], tablefmt="plain", disable_numparse=True)
    if not tail:
        return lines
    out = lines.splitlines()
    first, last = head[-1][0] + 1, tail[0][0] - 1
    hidden = last - first + 1
    cut = f"… {hidden} more move{'s' if hidden != 1 else ''} ({first} to {last}; -o json lists every move) …"
    return "\n".join([*out[: 1 + len(head)], cut, *out[1 + len(head) :]])


def render_plan(result: Plan, source: str, max_rows: int | None = None) -> str:
    lines = [_headline(result), f"source: {source}", ""]
    if result.moves:
        lines.append(moves_table(list(result.moves), max_rows))
        lines.append("")
    else:
        lines.append("no moves: nothing can be freed within the limits")
        lines.append("")
    metrics = before_after(result.before, result.after)
    lines.append(tabulate(metrics, headers=["", "BEFORE", "AFTER"], tablefmt="plain", disable_numparse=True))
    room = demand_line(result)
    if room:
        lines.append(f"\n{room}")
    early = stopping_line(result)
    if early:
        lines.append(f"\n{early}")
    if result.immovable:
        kept = sum(n for _, n in result.immovable)
        why = "; ".join(f"{n} {reason}" for reason, n in result.immovable)
        lines.append(f"\nnot moved ({kept} pods): {why}")
    solver = f"{result.solver} planner" + (f" ({result.solver_note})" if result.solver_note else "")
    lines.append(f"\nplanned in {result.seconds:.2f}s by the {solver}")
    return "\n".join(lines)


def placements(
    result: Plan | RoomPlan, pods: dict[str, dict[str, Any]], kube: Kube | None = None
) -> list[dict[str, Any]]:
    """One HamiPodPlacement with evictPod per move, in plan order.

    podSelector must match the pod's replacement. With a live cluster it is the controller's own
    selector (ReplicaSet/StatefulSet, plus the pod name for a StatefulSet); from a snapshot, which
    holds no controllers, it is the pod's labels (a ReplicaSet's pods carry its pod-template-hash,
    so this matches only that ReplicaSet's pods). reqID is `plan-<hash of the plan>-<step>`: the
    same plan gives the same manifests, and different plans never share a reqID.
    """
    digest = hashlib.sha256(json.dumps([m.as_dict() for m in result.moves], sort_keys=True).encode()).hexdigest()[:8]
    owners: dict[str, dict[str, Any] | None] = {}
    out = []
    for i, m in enumerate(result.moves, start=1):
        pod = pods.get(m.pod) or {"metadata": {"name": m.name, "namespace": m.namespace}}
        owner = None
        if kube is not None and m.workload:
            if m.workload not in owners:
                owners[m.workload] = controller_of(kube, pod)
            owner = owners[m.workload]
        try:
            selector = hp.replacement_selector(pod, owner)
        except TargetError as e:
            raise UserError(f"move {i} ({m.pod}): {e}") from e
        req_id = f"plan-{digest}-{i:03d}"
        doc = hp.new_placement(
            m.namespace,
            hp.placement_name(f"defrag-{m.name}", req_id),
            req_id,
            selector,
            m.to_node,
            m.gpu_devices,
            evict_pod=m.name,
            created_by=CREATED_BY,
        )
        doc["metadata"]["annotations"] = {PLAN_ANNOTATION: digest, STEP_ANNOTATION: f"{i}/{len(result.moves)}"}
        out.append(doc)
    return out
