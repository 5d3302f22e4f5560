"""Making room for a gang from the command line: `plan --for KIND/NAME` (a pod group, Job, JobSet,
LeaderWorkerSet or Workload whose pods wait together) and `plan --for-request SPEC,pods=N` (N pods
like SPEC that must all fit at once).

The group is read by the core (hami_place_core/gangs.py: which pods belong, how many must fit at
once, from the group's own object when this user may read it) and the room is planned by the core
(planning/gang_room.py); this module names what the user typed, prints the plan, and says why
there is none (exit 1).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import click
from tabulate import tabulate

from hami_place_core import gangs
from hami_place_core.kube import errors as kube_errors
from hami_place_core.planning import PlanOptions as PlannerOptions
from hami_place_core.planning.gang_room import GangRoom, make_room_for_gang
from hami_place_core.planning.room import RoomRequest, parse_room_request
from hami_place_core.state import ClusterState
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.printers import counted

GANG_KIND = "HamiGangRoomPlan"
MAX_MEMBERS = 256  # a --for-request gang; a real group is as large as its pods


def is_gang(for_pod: str | None, for_request: str | None) -> bool:
    """`--for KIND/NAME` (a pod's name has no slash) or `--for-request ...,pods=N`."""
    if for_pod is not None:
        return "/" in for_pod
    return for_request is not None and any(p.partition("=")[0].strip() == "pods" for p in for_request.split(","))


def _pods_of(spec: str) -> tuple[str, int]:
    """SPEC without its `pods=N`, and N (1 when absent); a bad N is a usage error."""
    keep, pods = [], 1
    for part in spec.split(","):
        key, _, value = part.partition("=")
        if key.strip() != "pods":
            keep.append(part)
            continue
        if not value.strip().isdigit() or not 1 <= int(value) <= MAX_MEMBERS:
            raise click.UsageError(f"--for-request: pods={value!r}: a whole number from 1 to {MAX_MEMBERS}")
        pods = int(value)
    return ",".join(keep), pods


def gang_requests(
    kube: Kube | None, for_pod: str | None, for_request: str | None, pods: list[dict[str, Any]]
) -> tuple[str, list[RoomRequest]]:
    """(what the gang is called, the requests of the members to place)."""
    if for_pod is not None and for_request is not None:
        raise click.UsageError("--for and --for-request exclude each other")
    if for_request is not None:
        spec, n = _pods_of(for_request)
        try:
            one = parse_room_request(spec)
        except ValueError as e:
            raise click.UsageError(f"--for-request: {e}") from e
        return f"{n} pods of {one.describe()}", [one] * n
    assert for_pod is not None
    if kube is None:
        raise click.UsageError("--for KIND/NAME needs the live cluster (use --for-request ...,pods=N with --snapshot)")
    gang = _find(kube, for_pod, pods)
    return _members(gang)


def _find(kube: Kube, text: str, pods: list[dict[str, Any]]) -> gangs.Gang:
    ns = kube.effective_namespace()
    try:
        found = gangs.find_gang(text, ns, pods)
        obj = _group_object(kube, found.ref)
        return gangs.gang(found.ref, found.members, obj) if obj is not None else found
    except gangs.GangError as e:
        raise UserError(str(e)) from e


def _group_object(kube: Kube, ref: gangs.GangRef) -> dict[str, Any] | None:
    """The object that states the group's size; None when it is not there or not readable (the
    size is then the members seen, and the plan says so)."""
    path = gangs.object_path(ref)
    if not path:
        return None
    try:
        return dict(kube.request("GET", path))
    except (kube_errors.NotFound, kube_errors.Forbidden):
        return None


def _members(gang: gangs.Gang) -> tuple[str, list[RoomRequest]]:
    need = gang.min_count - gang.running
    waiting = gang.waiting
    what = f"{gang.ref} ({gang.min_count} at once, {gang.size_from})"
    if need <= 0:
        raise UserError(f"{what}: {gang.running} members are running already; no room is needed")
    if len(waiting) < need:
        raise UserError(f"{what}: {need} more must start but only {len(waiting)} members wait (are pods missing?)")
    try:
        return what, [RoomRequest.from_pod(p, webhook=False) for p in waiting[:need]]
    except ValueError as e:
        raise UserError(f"{what}: {e}") from e


def plan_gang(state: ClusterState, what: str, requests: list[RoomRequest], options: PlannerOptions) -> GangRoom:
    room = make_room_for_gang(state, requests, replace(options, solver="greedy"))
    if not room.ok:
        raise UserError(f"no room for {what}: {room.reason}")
    return room


def gang_doc(room: GangRoom, what: str, source: str) -> dict[str, Any]:
    return {"kind": GANG_KIND, "source": source, "gang": what, **room.as_dict()}


def render_gang(room: GangRoom, what: str, source: str) -> str:
    n = len(room.moves)
    head = f"{what}: every member fits at once " + (f"after {counted(n, 'move')}" if n else "now: no moves needed")
    lines = [head, f"source: {source}", ""]
    members = [(m.name, m.node, ",".join(f"gpu-{g}" for g in m.gpus), m.moves) for m in room.members]
    lines.append(
        tabulate(members, headers=["MEMBER", "NODE", "GPUS", "MOVES"], tablefmt="plain", disable_numparse=True)
    )
    if room.moves:
        rows = [
            (
                i,
                m.pod,
                f"{m.from_node} {','.join(f'gpu-{g}' for g in m.from_gpus)}",
                f"{m.to_node} {','.join(m.gpu_devices)}",
            )
            for i, m in enumerate(room.moves, start=1)
        ]
        lines += ["", tabulate(rows, headers=["#", "POD", "FROM", "TO"], tablefmt="plain", disable_numparse=True)]
    lines.append(f"\nplanned in {room.seconds:.2f}s")
    return "\n".join(lines)


def _at(node: str, gpus: tuple[int, ...]) -> str:
    return f"{node} {','.join(f'gpu-{g}' for g in gpus)}"


def _table(rows: list[tuple[object, ...]], headers: list[str]) -> str:
    return str(tabulate(rows, headers=headers, tablefmt="plain", disable_numparse=True))
