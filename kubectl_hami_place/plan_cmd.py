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
from kubectl_hami_place.moves import describe_move, namespace_only
from kubectl_hami_place.options import kube_options, output_formats, planner_options, selector_option
from kubectl_hami_place.printers import counted, is_structured, print_structured, warn_if_exact_skipped
from kubectl_hami_place.quiet import stdout_to_stderr

PLAN_OUTPUTS = ("table", "json", "yaml")
# -o json's apiVersion and kind: a client-side document (no such object exists in the cluster)
PLAN_API_VERSION = "scheduling.hami.placement.com/v1"
PLAN_KIND = "HamiPlacementPlan"
ROOM_KIND = "HamiRoomPlan"  # plan --for / --for-request
CREATED_BY = "kubectl-hami-place-plan"
PLAN_ANNOTATION = "scheduling.hami.placement.com/plan"
STEP_ANNOTATION = "scheduling.hami.placement.com/plan-step"


def _check_report(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--report's format follows its extension: anything but .html or .svg is a usage error."""
    from kubectl_hami_place.report import FORMATS, report_format

    if value is not None and report_format(value) is None:
        raise click.BadParameter(f"{value!r}: the file name must end in {' or '.join(FORMATS)}", ctx, param)
    return value


def _write_report(path: str, state: Any, planned: Any, source: str) -> None:
    """The before/after picture (kubectl_hami_place/report.py); the callback checked the extension."""
    from kubectl_hami_place import report

    report.write(path, report.build(state, planned, source, report.report_format(path) or "html"))


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
@output_formats(
    PLAN_OUTPUTS,
    "table: the moves and the metrics before and after; json: the plan (kind HamiPlacementPlan, or "
    "HamiRoomPlan with --for); yaml: one HamiPodPlacement (with evictPod) per move, to apply in order.",
    "{.moves[*].pod}",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=2),
    metavar="N",
    help="Table output: show at most N moves, the first and the last ones, with a line saying how many "
    "more are in between (default: every move; -o json/yaml always hold every move).",
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
@click.option(
    "--report",
    type=click.Path(),  # not dir_okay=False: a directory is an unwritable path (exit 1), not a usage error
    callback=_check_report,
    metavar="FILE",
    help="Also write the plan's before/after GPU heatmap as a self-contained picture, in the format of "
    "FILE's extension: .html (a page with the figures) or .svg. Every node is drawn up to 10,000 GPUs; "
    "above, only the nodes the plan touches.",
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
    max_rows: int | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
    for_pod: str | None = None,
    for_request: str | None = None,
    report: str | None = None,
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
      kubectl hami-place plan --snapshot example --max-moves 250 --max-rows 20   # first 10, last 10
      kubectl hami-place plan --max-moves 20 --exclude-namespace prod
      kubectl hami-place plan -n ml                         # only namespace ml's pods move
      kubectl hami-place plan --objective fragmentation -o json
      kubectl hami-place plan -o jsonpath='{range .moves[*]}{.pod}{" -> "}{.to.node}{"\\n"}{end}'
      kubectl hami-place plan --max-moves 5 -o yaml > moves.yaml   # apply one at a time, in order
      kubectl hami-place plan --for train-0 -n ml         # the moves after which Pending pod train-0 fits
      kubectl hami-place plan --snapshot example --for-request gpus=8
      kubectl hami-place plan --snapshot example --report plan.html   # the before/after heatmap
    """
    from hami_place_core.planning import PlanOptions
    from hami_place_core.state import build_state
    from kubectl_hami_place.progress import Progress
    from kubectl_hami_place.render import warn_unreadable

    if snapshot and selector:
        raise click.UsageError("-l/--selector cannot be combined with --snapshot")
    if report and (for_pod is not None or for_request is not None):
        raise click.UsageError("--report draws a defragmentation plan: it cannot be combined with --for/--for-request")
    # On a terminal, a progress line on stderr once this takes over a second. From the live
    # cluster it starts once the nodes are read: an exec plugin may need the terminal to log in.
    progress = Progress("reading the snapshot" if snapshot else "reading the cluster", started=bool(snapshot))
    with progress:
        if snapshot:
            from hami_place_core.examples import resolve_snapshot
            from hami_place_core.snapshot import load_snapshot

            raw_nodes, raw_pods, meta = load_snapshot(resolve_snapshot(snapshot))
            source = f"snapshot {snapshot} ({meta.get('source', 'unknown source')})"
            kube = None
        else:
            from kubectl_hami_place.inspect_cmd import load_cluster
            from kubectl_hami_place.kube import Kube

            kube = Kube(kubeconfig, context, namespace, all_namespaces, request_timeout)
            raw_nodes, raw_pods = load_cluster(kube, selector, progress.start)
            source = kube.server
        progress.label = "planning"
        state = build_state(raw_nodes, raw_pods)
        # -n without --for: only that namespace's pods move (with --for it is the pod's namespace).
        scope = namespace if not all_namespaces and for_pod is None and for_request is None else None
        with stdout_to_stderr():  # a solver's banner must not reach `-o json | jq`
            planned = _compute(
                state,
                PlanOptions(
                    kept_pods=namespace_only(state.pods, scope),
                    objective=objective,  # type: ignore[arg-type]
                    max_moves=max_moves,
                    excluded_namespaces=frozenset({"kube-system", *excluded}),
                    max_moves_per_workload=max_moves_per_workload,
                    max_moves_per_gpu=max_moves_per_gpu,
                    solver=solver,  # type: ignore[arg-type]
                ),
                kube,
                for_pod,
                for_request,
            )
    if for_pod is not None or for_request is not None:
        _print_room(planned, state, source, output, kube, raw_pods)
        return
    warn_unreadable(state)  # once the command is sure to answer: an error stays one line
    if report:  # before the output: a report that cannot be written fails the command (exit 1)
        _write_report(report, state, planned, source)
    if output == "yaml":
        _print_manifests(planned, raw_pods, kube)
    elif is_structured(output):
        print_structured(plan_doc(planned, source), output)
    else:
        click.echo(render_plan(planned, source, max_rows))


def _compute(state: Any, options: Any, kube: Any, for_pod: str | None, for_request: str | None) -> Any:
    """The plan, or with --for/--for-request the room plan (exit 1 when none fits)."""
    from hami_place_core.planning import SolverUnavailable
    from hami_place_core.planning import plan as make_plan

    if for_pod is not None or for_request is not None:
        from hami_place_core.planning.room import make_room
        from kubectl_hami_place.room import no_room, room_request

        request, _ = room_request(kube, for_pod, for_request)
        room = make_room(state, request, options)
        if not room.ok:
            raise no_room(room)
        return room
    try:
        result = make_plan(state, options)
    except SolverUnavailable as e:
        raise UserError(str(e)) from e
    warn_if_exact_skipped(options.solver, result.solver_note)
    return result


def plan_doc(result: Any, source: str) -> dict[str, Any]:
    """-o json (and jsonpath's input): the plan, as a document with kubectl's apiVersion and kind."""
    return {"apiVersion": PLAN_API_VERSION, "kind": PLAN_KIND, "source": source, **result.as_dict()}


def _print_manifests(result: Any, raw_pods: list[dict[str, Any]], kube: Any) -> None:
    """-o yaml: one HamiPodPlacement per move, in order."""
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
        parts.append(f"---\n# {i}. {describe_move(m)}\n" + yaml.safe_dump(doc, sort_keys=False).rstrip())
    click.echo("\n".join(parts))


def _print_room(room: Any, state: Any, source: str, output: str, kube: Any, raw_pods: list[dict[str, Any]]) -> None:
    """`plan --for/--for-request`: the fewest moves after which the pod fits."""
    from kubectl_hami_place.render import warn_unreadable
    from kubectl_hami_place.room import headline, render_room, room_doc

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
    import yaml

    return str(yaml.safe_dump(doc, sort_keys=False)).rstrip()


def _headline(result: Any) -> str:
    return (
        f"plan ({result.objective}): {counted(len(result.moves), 'move')}; "
        f"whole GPUs free {result.before.whole_free} -> {result.after.whole_free}, "
        f"FGD {result.before.fgd:.2f} -> {result.after.fgd:.2f}"
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
        "stopping early (every prefix of the plan is a valid plan): "
        f"the first {counted(n0, 'move')} free {counted(k0, 'GPU')}{steps}; all {n} free {k}"
    )


def _move_row(i: int, m: Any) -> tuple[object, ...]:
    return (
        i,
        m.pod,
        f"{m.from_node} {','.join(f'gpu-{g}' for g in m.from_gpus)}",
        f"{m.to_node} {','.join(m.gpu_devices)}",
        m.reason + (" (frees it)" if m.frees else "") + (f" (takes {', '.join(m.takes)})" if m.takes else ""),
    )


def moves_table(moves: list[Any], max_rows: int | None = None) -> str:
    """The moves, one row each; with `max_rows`, a long plan shows its first and last moves and says
    in a line of its own how many it leaves out between them (never a silent cut)."""
    from tabulate import tabulate

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


def render_plan(result: Any, source: str, max_rows: int | None = None) -> str:
    from tabulate import tabulate

    lines = [_headline(result), f"source: {source}", ""]
    if result.moves:
        lines.append(moves_table(list(result.moves), max_rows))
        lines.append("")
    else:
        lines.append("no moves: nothing can be freed within the limits")
        lines.append("")
    from kubectl_hami_place.render import before_after

    metrics = before_after(result.before, result.after)
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
