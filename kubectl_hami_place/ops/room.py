"""Making room for one pod from the command line: `plan --for/--for-request` and `defrag --for`.

The planning is the core's (hami_place_core/planning/room/); this module turns what the
user names into a RoomRequest, explains a plan (or why there is none) and pins the pending pod on
the room made.
"""

from __future__ import annotations

from typing import Any

import click
from tabulate import tabulate

from hami_place_core import placement as hp
from hami_place_core.planning import PlanOptions as PlannerOptions
from hami_place_core.planning.room import RoomPlan, RoomRequest, make_room, parse_room_request
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops.args import DefragOptions, MoveSettings
from kubectl_hami_place.ops.cluster import live_state, warn_unreadable
from kubectl_hami_place.ops.moves import describe_move, execute_move
from kubectl_hami_place.ops.placements import create_placement, follow_placement, placement_manifest
from kubectl_hami_place.ops.workloads import get_pod, pod_workload
from kubectl_hami_place.printers import counted


def room_request(
    kube: Kube | None, pod_name: str | None, spec: str | None
) -> tuple[RoomRequest, dict[str, Any] | None]:
    """The request of `--for POD` (a pending pod of the current namespace) or `--for-request SPEC`,
    and the pod object (None for a hypothetical request)."""
    if pod_name and spec:
        raise click_usage("--for and --for-request exclude each other")
    if spec:
        try:
            return parse_room_request(spec), None
        except ValueError as e:
            raise click_usage(f"--for-request: {e}") from e
    assert pod_name
    if kube is None:
        raise click_usage("--for POD needs the live cluster (use --for-request with --snapshot)")
    ns = kube.effective_namespace()
    pod = get_pod(kube, ns, pod_name)
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        raise UserError(
            f"pod {ns}/{pod_name} is already scheduled (on node {node}); --for takes a Pending pod "
            "(use --for-request to plan for another pod like it)"
        )
    try:
        # A pod that exists has been through HAMi's admission webhook: its request is final.
        return RoomRequest.from_pod(pod, webhook=False), pod
    except ValueError as e:
        raise UserError(str(e)) from e


def click_usage(message: str) -> Exception:
    return click.UsageError(message)


def headline(room: RoomPlan) -> str:
    where = f"{room.node} {','.join(room.gpu_devices)}"
    n = len(room.moves)
    if not room.moves:
        return f"{room.request.name} ({room.request.describe()}) fits now on {where}: no moves needed"
    return f"{room.request.name} ({room.request.describe()}) fits on {where} after {n} move{'s' if n != 1 else ''}"


def render_room(room: RoomPlan, source: str) -> str:
    lines = [headline(room), f"source: {source}", ""]
    if room.moves:
        rows = [
            (
                i,
                m.pod,
                f"{m.from_node} {','.join(f'gpu-{g}' for g in m.from_gpus)}",
                f"{m.to_node} {','.join(m.gpu_devices)}",
                m.reason,
            )
            for i, m in enumerate(room.moves, start=1)
        ]
        lines.append(tabulate(rows, headers=["#", "POD", "FROM", "TO", "WHY"], tablefmt="plain", disable_numparse=True))
        lines.append("")
    for note in room.request.notes:
        lines.append(f"note: {note}")
    lines.append(f"planned in {room.seconds:.2f}s over {room.nodes_tried} candidate nodes")
    return "\n".join(lines)


def room_doc(room: RoomPlan, source: str) -> dict[str, Any]:
    return {"source": source, **room.as_dict()}


def no_room(room: RoomPlan) -> UserError:
    return UserError(f"no room for {room.request.name} ({room.request.describe()}): {room.reason}")


def pin_pending(kube: Kube, pod: dict[str, Any], room: RoomPlan, settings: MoveSettings) -> str:
    """Put the pending pod on the room made: a placement for its workload that evicts the pending
    pod, so its controller recreates it pinned there. A pod without a controller is left alone
    (never deleted): the scheduler places it on the room made. Returns what was done."""
    meta = pod["metadata"]
    ns, name = meta["namespace"], meta["name"]
    if not any(o.get("controller") for o in meta.get("ownerReferences") or ()):
        return f"room made for {ns}/{name}; it has no controller, so the scheduler places it (it is never deleted)"
    assert room.node is not None  # a room plan that was made names its node
    wl = pod_workload(kube, pod)
    req_id = hp.new_req_id()
    placement = hp.placement_name(f"room-{name}", req_id)
    manifest = placement_manifest(
        ns, placement, req_id, wl.selector, room.node, tuple(room.gpu_devices), name, settings.eviction_timeout
    )
    manifest["metadata"]["labels"][hp.CREATED_BY_LABEL] = "kubectl-hami-place-defrag"
    create_placement(kube, manifest, None)
    follow_placement(kube, ns, placement, settings.agent, settings.timeout)
    where = f"{room.node} {','.join(room.gpu_devices)}"
    return f"{ns}/{name} recreated by its controller on {where} (placement {placement})"


def defrag_for(kube: Kube, pod_name: str, options: DefragOptions) -> None:
    """`defrag --for POD`: print the plan, or (--apply) make each move, re-planning from the live
    cluster after each, then put the pending pod on the room made."""

    def planner(done: int) -> PlannerOptions:
        return PlannerOptions(
            max_moves=options.max_moves - done,
            excluded_namespaces=frozenset({"kube-system", *options.planner.excluded}),
            max_moves_per_workload=options.planner.max_moves_per_workload,
            solver="greedy",
        )

    request, pod = room_request(kube, pod_name, None)
    assert pod is not None
    state = live_state(kube, options.selector, warn=False)
    room = make_room(state, request, planner(0))
    if not room.ok:
        raise no_room(room)
    warn_unreadable(state)
    click.echo(headline(room))
    if not options.apply:
        for i, m in enumerate(room.moves, 1):
            click.echo(f"  {i}. {describe_move(m)}")
        click.echo("dry run: nothing changed; run with --apply to execute")
        return
    done = 0
    while room.moves:
        click.echo(f"move {done + 1}: {describe_move(room.moves[0])}")
        try:
            execute_move(kube, room.moves[0], options.moves)
        except UserError as e:
            raise UserError(f"defrag --for stopped at move {done + 1}: {e}") from e
        done += 1
        placed = _scheduled(kube, pod)
        if placed:
            # The room made was enough and the scheduler placed the pod itself on its next try.
            click.echo(f"room made after {counted(done, 'move')}: {placed}")
            return
        room = make_room(live_state(kube, options.selector, warn=False), request, planner(done))
        if not room.ok:
            raise UserError(f"after {counted(done, 'move')} the room is gone: {room.reason}")
    click.echo(f"room made after {counted(done, 'move')}: {headline(room)}")
    click.echo(pin_pending(kube, pod, room, options.moves))


def _scheduled(kube: Kube, pod: dict[str, Any]) -> str:
    """What became of the pending pod: "" while it still waits, else a sentence saying where it went."""
    meta = pod["metadata"]
    try:
        now = get_pod(kube, meta["namespace"], meta["name"])
    except UserError:
        return f"{meta['namespace']}/{meta['name']} is gone (deleted or recreated by its controller)"
    node = (now.get("spec") or {}).get("nodeName")
    return f"the scheduler placed {meta['namespace']}/{meta['name']} on node {node}" if node else ""
