"""`kubectl hami-place plan`: the moves that would defragment the cluster, changing nothing.

Heavy and client-using modules are imported inside the command, so `--help` and the plugin's
start-up never pay for them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import click

from kubectl_hami_place.errors import UserError
from kubectl_hami_place.options import kube_options, planner_options, selector_option

PLAN_OUTPUTS = ("table", "json", "yaml")
CREATED_BY = "kubectl-hami-place-plan"
PLAN_ANNOTATION = "scheduling.hami.placement.com/plan"
STEP_ANNOTATION = "scheduling.hami.placement.com/plan-step"


@click.command()
@planner_options
@click.option(
    "--max-moves", type=click.IntRange(min=0), metavar="N", help="At most N moves in all (default: no limit)."
)
@click.option(
    "--max-moves-per-gpu",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    metavar="N",
    help="Free a GPU only if it takes at most N moves (its pods plus those moved to make room).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(PLAN_OUTPUTS),
    default="table",
    show_default=True,
    help="table: the moves and the metrics before and after; json: the plan; "
    "yaml: one HamiPodPlacement (with evictPod) per move, to apply in order.",
)
@click.option(
    "--snapshot",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Plan on a snapshot written by `inspect -o json` instead of the live cluster; `example` is the "
    "shipped 1,213-node openb cluster (a local file named example: ./example).",
)
@click.option(
    "--for",
    "for_pod",
    metavar="POD",
    help="Instead: the fewest moves after which this Pending pod (in -n's namespace) fits, and where it goes.",
)
@click.option(
    "--for-request",
    metavar="SPEC",
    help="Instead: the fewest moves after which a pod asking for SPEC fits, e.g. "
    "gpus=4,gpumem-percentage=50,type=A100,node-selector=pool=a (keys: gpus, gpumem, gpumem-percentage, "
    "gpucores, type, nouse-type, uuid, nouse-uuid, node-selector, toleration, cpu, memory).",
)
@selector_option("Only nodes with these labels: plan for one node pool (live cluster only).")
@kube_options
def plan(
    objective: str,
    solver: str,
    max_moves: int | None,
    max_moves_per_workload: int,
    max_moves_per_gpu: int,
    excluded: tuple[str, ...],
    output: str,
    snapshot: str | None,
    selector: str | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
    for_pod: str | None = None,
    for_request: str | None = None,
) -> None:
    """Plan pod moves that free whole GPUs (or lower fragmentation), or that make room for one
    pod (--for, --for-request). Changes nothing.

    Every move is valid in the state the moves before it leave: HAMi's Fit holds on the target
    GPUs (memory, cores, share slots, GPU type and UUID selectors) and kube-scheduler would accept
    the node (nodeSelector, required node affinity, taints). Only pods a controller recreates
    (ReplicaSet, StatefulSet, ReplicationController) move; not pods of excluded namespaces, not
    pods annotated scheduling.hami.placement.com/defrag: "false".

    \b
    Examples:
      kubectl hami-place plan --snapshot example
      kubectl hami-place plan --max-moves 20 --exclude-namespace prod
      kubectl hami-place plan --objective fragmentation -o json
      kubectl hami-place plan --max-moves 5 -o yaml > moves.yaml   # apply one at a time, in order
      kubectl hami-place plan --for train-0 -n ml         # the moves after which Pending pod train-0 fits
      kubectl hami-place plan --snapshot example --for-request gpus=8
    """
    from hami_place_core.planning import PlanOptions, SolverUnavailable
    from hami_place_core.planning import plan as make_plan
    from hami_place_core.state import build_state
    from kubectl_hami_place.render import warn_unreadable

    if snapshot:
        from hami_place_core.examples import resolve_snapshot
        from hami_place_core.snapshot import load_snapshot

        if selector:
            raise UserError("-l/--selector cannot be combined with --snapshot")
        raw_nodes, raw_pods, meta = load_snapshot(resolve_snapshot(snapshot))
        source = f"snapshot {snapshot} ({meta.get('source', 'unknown source')})"
        kube = None
    else:
        from kubectl_hami_place.inspect_cmd import load_cluster
        from kubectl_hami_place.kube import Kube

        kube = Kube(kubeconfig, context, namespace, all_namespaces, request_timeout)
        raw_nodes, raw_pods = load_cluster(kube, selector)
        source = kube.server
    state = build_state(raw_nodes, raw_pods)
    options = PlanOptions(
        objective=objective,  # type: ignore[arg-type]
        max_moves=max_moves,
        excluded_namespaces=frozenset({"kube-system", *excluded}),
        max_moves_per_workload=max_moves_per_workload,
        max_moves_per_gpu=max_moves_per_gpu,
        solver=solver,  # type: ignore[arg-type]
    )
    if for_pod or for_request:
        _plan_room(state, options, source, output, kube, for_pod, for_request, raw_pods)
        return
    try:
        result = make_plan(state, options)
    except SolverUnavailable as e:
        raise UserError(str(e)) from e
    warn_unreadable(state)  # once the command is sure to answer: an error stays one line
    if output == "json":
        click.echo(json.dumps({"source": source, **result.as_dict()}, indent=2))
    elif output == "yaml":
        import yaml

        pods = {
            f"{(p.get('metadata') or {}).get('namespace')}/{(p.get('metadata') or {}).get('name')}": p for p in raw_pods
        }
        docs = placements(result, pods, kube)
        if not docs:
            click.echo(f"# no moves: {_headline(result)}")
            return
        parts = [f"# {_headline(result)}\n# Apply one at a time, in order, each after the one before is Completed."]
        early = stopping_line(result)
        if early:
            parts[0] += f"\n# {early}"
        for i, (m, doc) in enumerate(zip(result.moves, docs, strict=True), start=1):
            parts.append(f"---\n# {i}. {describe(m)}\n" + yaml.safe_dump(doc, sort_keys=False).rstrip())
        click.echo("\n".join(parts))
    else:
        click.echo(render_plan(result, source))


def _plan_room(
    state: Any,
    options: Any,
    source: str,
    output: str,
    kube: Any,
    for_pod: str | None,
    for_request: str | None,
    raw_pods: list[dict[str, Any]],
) -> None:
    """`plan --for/--for-request`: the fewest moves after which the pod fits; exit 1 when none do."""
    from hami_place_core.planning.make_room import make_room
    from kubectl_hami_place.render import warn_unreadable
    from kubectl_hami_place.room import headline, no_room, render_room, room_json, room_request

    request, _ = room_request(kube, for_pod, for_request)
    room = make_room(state, request, options)
    if not room.ok:
        raise no_room(room)
    warn_unreadable(state)
    if output == "json":
        click.echo(room_json(room, source))
    elif output == "yaml":
        pods = {f"{p['metadata'].get('namespace')}/{p['metadata'].get('name')}": p for p in raw_pods}
        parts = [f"# {headline(room)}\n# Apply one at a time, in order, each after the one before is Completed."]
        for i, (m, doc) in enumerate(zip(room.moves, placements(room, pods, kube), strict=True), start=1):
            parts.append(f"---\n# {i}. {describe(m)}\n" + _yaml(doc))
        click.echo("\n".join(parts))
    else:
        click.echo(render_room(room, source))


def _yaml(doc: dict[str, Any]) -> str:
    import yaml

    return str(yaml.safe_dump(doc, sort_keys=False)).rstrip()


def _headline(result: Any) -> str:
    return (
        f"plan ({result.objective}): {len(result.moves)} moves; whole GPUs free {result.before.whole_free} -> "
        f"{result.after.whole_free}, FGD {result.before.fgd:.2f} -> {result.after.fgd:.2f}"
    )


def stopping_line(result: Any) -> str | None:
    """Where the plan's gain comes from: the last moves buy the least (see Plan.stopping_points)."""
    points = result.stopping_points()
    if len(points) < 2:
        return None
    (n0, k0), *rest = points[:-1]
    steps = "".join(f", {n} free {k}" for n, k in rest)
    n, k = points[-1]
    return (
        f"stopping early (every prefix of the plan is a valid plan): the first {n0} moves free {k0} GPUs{steps}; "
        f"all {n} free {k}"
    )


def describe(m: Any) -> str:
    frm = ",".join(f"gpu-{i}" for i in m.from_gpus)
    frees = f"; frees {', '.join(m.frees)}" if m.frees else ""
    takes = f"; takes {', '.join(m.takes)}" if m.takes else ""
    return f"{m.pod}: {m.from_node} {frm} -> {m.to_node} {','.join(m.gpu_devices)} ({m.reason}{frees}{takes})"


def render_plan(result: Any, source: str) -> str:
    from tabulate import tabulate

    lines = [_headline(result), f"source: {source}", ""]
    if result.moves:
        rows = [
            (
                i,
                m.pod,
                f"{m.from_node} {','.join(f'gpu-{g}' for g in m.from_gpus)}",
                f"{m.to_node} {','.join(m.gpu_devices)}",
                m.reason + (" (frees it)" if m.frees else "") + (f" (takes {', '.join(m.takes)})" if m.takes else ""),
            )
            for i, m in enumerate(result.moves, start=1)
        ]
        lines.append(tabulate(rows, headers=["#", "POD", "FROM", "TO", "WHY"], tablefmt="plain", disable_numparse=True))
        lines.append("")
    else:
        lines.append("no moves: nothing can be freed within the limits")
        lines.append("")
    b, a = result.before, result.after
    metrics = [
        ("whole GPUs free", b.whole_free, a.whole_free),
        ("GPUs in use", b.in_use, a.in_use),
        ("free capacity (GPUs)", f"{b.free:.2f}", f"{a.free:.2f}"),
        ("stranded (GPUs)", f"{b.stranded:.2f}", f"{a.stranded:.2f}"),
        ("FGD (GPUs)", f"{b.fgd:.2f}", f"{a.fgd:.2f}"),
    ]
    lines.append(tabulate(metrics, headers=["", "BEFORE", "AFTER"], tablefmt="plain", disable_numparse=True))
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


def placements(result: Any, pods: dict[str, dict[str, Any]], kube: Any = None) -> list[dict[str, Any]]:
    """One HamiPodPlacement with evictPod per move, in plan order.

    podSelector must match the pod's replacement. With a live cluster it is the controller's own
    selector (ReplicaSet/StatefulSet, plus the pod name for a StatefulSet); from a snapshot, which
    holds no controllers, it is the pod's labels (a ReplicaSet's pods carry its pod-template-hash,
    so this matches only that ReplicaSet's pods). reqID is `plan-<hash of the plan>-<step>`: the
    same plan gives the same manifests, and different plans never share a reqID.
    """
    from hami_place_core import placement as hp
    from hami_place_core.targets import TargetError

    digest = hashlib.sha256(json.dumps([m.as_dict() for m in result.moves], sort_keys=True).encode()).hexdigest()[:8]
    owners: dict[str, dict[str, Any] | None] = {}
    out = []
    for i, m in enumerate(result.moves, start=1):
        pod = pods.get(m.pod) or {"metadata": {"name": m.name, "namespace": m.namespace}}
        owner = None
        if kube is not None and m.workload:
            if m.workload not in owners:
                from kubectl_hami_place.workloads import controller_of

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
