"""Creating, following and withdrawing placements: what `pin`, `move`, `evict` and `cancel` do,
and the steps `defrag` and making room share (a manifest, its creation, following it).

Every change goes through the Kubernetes API (a HamiPodPlacement), so the API server's RBAC and
the agent's validating webhook apply to the CLI exactly as to `kubectl apply`; progress is then
read back from the agent (or the object).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from hami_place_core import placement as hp
from hami_place_core import surge
from hami_place_core.kube import errors as kube_errors
from hami_place_core.requests import pod_request
from hami_place_core.state import node_state, pod_allocation
from hami_place_core.targets import TargetError, parse_targets, resolve
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops.args import AgentOptions, CancelOptions, MoveOptions, PinOptions, PlacementFlags
from kubectl_hami_place.ops.cluster import connect
from kubectl_hami_place.ops.follow import Reporter, find_agent, follow
from kubectl_hami_place.ops.status import RESOURCE
from kubectl_hami_place.ops.workloads import get_pod, pod_workload, resolve_workload
from kubectl_hami_place.options import STRATEGIES
from kubectl_hami_place.printers import counted, is_structured, object_name, print_structured


def _check_target(kube: Kube, node: str, gpus: tuple[str, ...]) -> str:
    """Fail early, with the same words as the agent, on a node or GPU that does not exist.

    Users who may not read nodes skip this; the agent's validating webhook checks it anyway."""
    try:
        obj = kube.request("GET", f"/api/v1/nodes/{node}")
    except kube_errors.NotFound as e:
        raise UserError(f"node {node} not found") from e
    except kube_errors.Forbidden:
        return ", ".join(gpus)
    try:
        devices = resolve(parse_targets(list(gpus)), node_state(obj))
    except TargetError as e:
        raise UserError(str(e)) from e
    return ", ".join(f"{g} ({d.uuid})" for g, d in zip(gpus, devices, strict=True))


def create_placement(kube: Kube, manifest: dict[str, Any], dry_run: str | None) -> dict[str, Any]:
    ns = manifest["metadata"]["namespace"]
    query = {"dryRun": "All"} if dry_run == "server" else None
    return dict(kube.request("POST", hp.placement_path(ns), query, body=manifest))


@contextlib.contextmanager
def hint_on_interrupt(ns: str, name: str) -> Iterator[None]:
    """From the moment placement ns/name exists: a Ctrl-C says that it stays, and how to follow or
    cancel it (a Ctrl-C before following started, while the binary still imported the follower,
    used to print only "interrupted")."""
    try:
        yield
    except KeyboardInterrupt:
        click.echo(
            f"\ninterrupted: placement {ns}/{name} stays in place.\n"
            f"  follow it: kubectl hami-place status {name} -n {ns} -w\n"
            f"  cancel it: kubectl hami-place cancel {name} -n {ns}",
            err=True,
        )
        raise


def follow_placement(kube: Kube, ns: str, name: str, agent: AgentOptions, timeout: float | None) -> None:
    """Stream progress until terminal: exit 0 on Completed, 1 (UserError) on Failed or timeout."""
    with hint_on_interrupt(ns, name):
        where = find_agent(kube, agent.namespace, agent.service)
        with Reporter() as reporter:
            final = follow(kube, ns, name, reporter, where, timeout)
    if final.get("phase") != "Completed":
        reason = final.get("reason") or final.get("phase")
        raise UserError(f"placement {ns}/{name} {str(final.get('phase')).lower()} ({reason}): {final.get('message')}")


def _announce(obj: dict[str, Any], what: str, target: str, dry_run: str | None, output: str) -> None:
    if output == "name":
        click.echo(object_name(RESOURCE, obj))
        return
    if is_structured(output):
        print_structured(obj, output)
        return
    meta, spec = obj["metadata"], obj["spec"]
    ns, name = meta["namespace"], meta["name"]
    verb = {"client": "would be created (client dry run)", "server": "validated (server dry run, nothing created)"}
    click.echo(f"placement {ns}/{name} {verb.get(dry_run or '', 'created')} (reqID {spec['reqID']})")
    click.echo(f"  {what}")
    click.echo(f"  target: node {spec['nodeName']}, GPUs {target}")
    if not dry_run:
        click.echo(f"  follow: kubectl hami-place status {name} -n {ns} -w")


def pin(options: PinOptions) -> None:
    """A placement for the next pod of a workload (or of a selector); nothing running is touched."""
    flags = options.placement
    kube = connect(flags.kube)
    ns = kube.effective_namespace()
    wl = resolve_workload(kube, ns, options.workload, options.selector)
    target = _check_target(kube, options.node, options.gpus)
    req_id = flags.req_id or hp.new_req_id()
    name = flags.placement_name or hp.placement_name(wl.stem, req_id)
    manifest = placement_manifest(ns, name, req_id, wl.selector, options.node, options.gpus, None)
    dry_run = _dry_run(flags)
    obj = manifest if dry_run == "client" else create_placement(kube, manifest, dry_run)
    with _created(ns, name, dry_run):
        _announce(obj, f"pins {wl.description}", target, dry_run, flags.output)
        if options.watch and not dry_run:
            follow_placement(kube, ns, name, flags.agent, options.timeout)


def _dry_run(flags: PlacementFlags) -> str | None:
    """--dry-run's client or server; None for a real creation (--dry-run=none)."""
    return None if flags.dry_run == "none" else flags.dry_run


def _created(ns: str, name: str, dry_run: str | None) -> contextlib.AbstractContextManager[None]:
    """The Ctrl-C hint once a placement was really created (not for a dry run)."""
    return contextlib.nullcontext() if dry_run else hint_on_interrupt(ns, name)


def placement_manifest(
    ns: str,
    name: str,
    req_id: str,
    selector: dict[str, Any],
    node: str,
    gpus: tuple[str, ...],
    evict: str | None,
    eviction_timeout: float | None = None,
    strategy: str = "Evict",
) -> dict[str, Any]:
    try:
        manifest = hp.new_placement(ns, name, req_id, selector, node, list(gpus), evict, strategy=strategy)
    except TargetError as e:
        raise UserError(str(e)) from e
    if evict and eviction_timeout:
        manifest["spec"]["timeouts"] = {"evictionSeconds": max(1, round(eviction_timeout))}
    return manifest


def move(options: MoveOptions) -> None:
    """A placement for a pod's replacement; with `evict`, the agent moves the pod now."""
    flags, pod_name, evict = options.placement, options.pod, options.evict
    kube = connect(flags.kube)
    ns = kube.effective_namespace()
    pod = get_pod(kube, ns, pod_name)
    strategy = STRATEGIES[options.strategy or "evict"]
    if strategy == hp.SURGE:
        refuse_surge(pod)
    wl = pod_workload(kube, pod)
    _refuse_without_controller(pod, ns, pod_name, evict)
    node, gpus = options.node, options.gpus
    if not gpus:
        node, gpus = _current_target(kube, pod)
    count_note = _gpu_count_note(pod, gpus, options.change_gpu_count)
    target = _check_target(kube, node, gpus)
    req_id = flags.req_id or hp.new_req_id()
    name = flags.placement_name or hp.placement_name(wl.stem, req_id)
    manifest = placement_manifest(
        ns, name, req_id, wl.selector, node, gpus, pod_name if evict else None, options.eviction_timeout, strategy
    )
    dry_run = _dry_run(flags)
    obj = manifest if dry_run == "client" else create_placement(kube, manifest, dry_run)
    if evict:
        what = _what_moves(pod_name, strategy, wl.description)
    else:
        what = (
            f"moves pod {pod_name} at its next restart: nothing is evicted now; {wl.description} lands on the "
            "target (use --evict to move it now)"
        )
    if count_note:
        what += f"; {count_note}"
    with _created(ns, name, dry_run):
        _announce(obj, what, target, dry_run, flags.output)
        if options.wait and not dry_run:
            follow_placement(kube, ns, name, flags.agent, options.timeout)


def _refuse_without_controller(pod: dict[str, Any], ns: str, pod_name: str, evict: bool) -> None:
    """A pod no controller recreates: evicting it would lose it, and nothing would claim the placement."""
    if any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or ()):
        return
    if evict:
        raise UserError(
            f"pod {ns}/{pod_name} has no controller to recreate it, so evicting it would lose it; "
            "recreate it yourself with a pin, or pin its workload"
        )
    raise UserError(
        f"pod {ns}/{pod_name} has no controller, so no replacement will ever be created to claim this "
        "placement; recreate the pod yourself after `pin -l` with its labels"
    )


def _what_moves(pod: str, strategy: str, description: str) -> str:
    if strategy == "Surge":
        return f"starts one more replica of {description} on the target, then removes pod {pod} once it is Ready"
    if strategy == "Auto":
        return f"surges where safe (else evicts pod {pod}, PDBs respected); {description} lands on the target"
    return f"evicts pod {pod} (PDBs respected); {description} lands on the target"


def refuse_surge(pod: dict[str, Any]) -> None:
    """What the agent would refuse at once (not a Deployment's or ReplicaSet's pod), said here."""
    try:
        surge.refuse_owner(pod)
    except surge.SurgeRefused as e:
        raise UserError(str(e)) from e


def _gpu_count_note(pod: dict[str, Any], gpus: tuple[str, ...], allowed: bool) -> str:
    """A placement gives the replacement one GPU per gpuDevices entry: refuse a different count
    than the pod's own unless asked (--change-gpu-count), and then say so."""
    try:
        containers = pod_request(pod).gpu_containers
    except ValueError:
        return ""
    has = containers[0].nums if containers else 0
    if not has or has == len(gpus):
        return ""
    if not allowed:
        raise UserError(
            f"pod {pod['metadata']['name']} has {has} GPU{'s' if has != 1 else ''} and the target names "
            f"{len(gpus)}: its replacement would get {len(gpus)}; name {has} GPU{'s' if has != 1 else ''}, or "
            "pass --change-gpu-count to mean it"
        )
    return f"the replacement gets {counted(len(gpus), 'GPU')} where the pod has {has} (--change-gpu-count)"


def _current_target(kube: Kube, pod: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The node and GPU indices the pod has now, from HAMi's allocation and the node's inventory."""
    alloc = pod_allocation(pod)
    name = pod["metadata"]["name"]
    if alloc is None or not alloc.node:
        raise UserError(f"pod {name} has no HAMi GPU allocation; give the target with --node and --gpu")
    node = node_state(kube.request("GET", f"/api/v1/nodes/{alloc.node}"))
    indices = []
    for uuid in sorted(alloc.per_gpu):
        dev = node.by_uuid(uuid)
        if dev is None:
            raise UserError(f"pod {name} uses GPU {uuid}, which node {alloc.node} does not register")
        indices.append(dev.index)
    return alloc.node, tuple(f"gpu-{i}" for i in sorted(set(indices)))


def cancel(options: CancelOptions) -> None:
    """Withdraw a placement not consumed yet (claimed or mid-move: only with `force`)."""
    name, force = options.name, options.force
    if options.kube.all_namespaces:
        raise click.UsageError("cancel withdraws one placement: name its namespace with -n, not -A")
    kube = connect(options.kube)
    ns = kube.effective_namespace()
    try:
        obj = kube.request("GET", hp.placement_path(ns, name))
    except kube_errors.NotFound as e:
        raise UserError(f"placement {ns}/{name} not found") from e
    p = hp.Placement.from_object(obj)
    if p.phase in hp.TERMINAL:
        raise UserError(f"placement {ns}/{name} is already {p.phase}; nothing to cancel (delete it with kubectl)")
    if p.phase != hp.PENDING and not force:
        raise UserError(
            f"placement {ns}/{name} is {p.phase} ({p.status.message or 'in progress'}); cancel it anyway with --force"
        )
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"resourceVersion": p.resource_version}}
    try:
        kube.request("DELETE", hp.placement_path(ns, name), body=body)
    except kube_errors.Conflict as e:
        raise UserError(f"placement {ns}/{name} changed while cancelling (claimed?); check it and retry") from e
    click.echo(f"placement {ns}/{name} cancelled (was {p.phase})")
