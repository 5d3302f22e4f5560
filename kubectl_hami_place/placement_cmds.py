"""`pin`, `move`, `evict` and `cancel`: the commands that create or withdraw placements.

Every change goes through the Kubernetes API (a HamiPodPlacement), so the API server's RBAC and
the agent's validating webhook apply to the CLI exactly as to `kubectl apply`; progress is then
read back from the agent (or the object).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import click

from kubectl_hami_place.errors import UserError
from kubectl_hami_place.options import (
    STRATEGIES,
    Duration,
    agent_options,
    create_output_option,
    eviction_timeout_option,
    kube_options,
    selector_option,
    strategy_option,
    target_options,
    watch_option,
)
from kubectl_hami_place.printers import counted

DEFAULT_MOVE_TIMEOUT = "10m"


def _kube(kw: dict[str, Any]) -> Any:
    from kubectl_hami_place.kube import Kube

    return Kube(kw["kubeconfig"], kw["context"], kw["namespace"], kw["all_namespaces"], kw["request_timeout"])


def _check_target(kube: Any, node: str, gpus: tuple[str, ...]) -> str:
    """Fail early, with the same words as the agent, on a node or GPU that does not exist.

    Users who may not read nodes skip this; the agent's validating webhook checks it anyway."""
    from hami_place_core.kube import errors as kube_errors
    from hami_place_core.state import node_state
    from hami_place_core.targets import TargetError, parse_targets, resolve

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


def create_placement(kube: Any, manifest: dict[str, Any], dry_run: str | None) -> dict[str, Any]:
    from hami_place_core import placement as hp

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


def follow_placement(kube: Any, ns: str, name: str, kw: dict[str, Any], timeout: float | None) -> None:
    """Stream progress until terminal: exit 0 on Completed, 1 (UserError) on Failed or timeout."""
    with hint_on_interrupt(ns, name):
        from kubectl_hami_place.follow import Reporter, find_agent, follow

        agent = find_agent(kube, kw["agent_namespace"], kw["agent_service"])
        with Reporter() as reporter:
            final = follow(kube, ns, name, reporter, agent, timeout)
    if final.get("phase") != "Completed":
        reason = final.get("reason") or final.get("phase")
        raise UserError(f"placement {ns}/{name} {str(final.get('phase')).lower()} ({reason}): {final.get('message')}")


def _announce(obj: dict[str, Any], what: str, target: str, dry_run: str | None, output: str) -> None:
    from kubectl_hami_place.printers import is_structured, object_name, print_structured
    from kubectl_hami_place.status_cmd import RESOURCE

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


def _dry_run_option(fn: Any) -> Any:
    return click.option(
        "--dry-run",
        type=click.Choice(["none", "client", "server"]),
        default="none",
        show_default=True,
        help="client: print the placement only; server: have the API server and the agent validate it.",
    )(fn)


def _name_options(fn: Any) -> Any:
    fn = click.option("--name", "placement_name", metavar="NAME", help="Placement name (default: <workload>-<reqID>).")(
        fn
    )
    return click.option(
        "--req-id",
        metavar="ID",
        callback=_check_req_id,
        help="Request ID, 5-63 characters: letters, digits, '-', '_', '.' (default: random).",
    )(fn)


def _check_req_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The CRD's rule for spec.reqID, checked before anything is sent (exit 2, as --gpu is)."""
    from hami_place_core import placement as hp

    if value is not None and (problem := hp.req_id_problem(value)):
        raise click.BadParameter(problem, ctx, param)
    return value


@click.command()
@click.argument("workload", required=False, metavar="[deploy/NAME | sts/NAME | rs/NAME]")
@selector_option("Pin the next pod matching this selector instead of a workload's (e.g. -l app=web).")
@target_options()
@_name_options
@_dry_run_option
@watch_option("Follow the placement until the pod is placed (Completed) or it fails.")
@click.option("--timeout", type=Duration(), metavar="DURATION", help="With -w: give up after this long (e.g. 5m).")
@create_output_option
@agent_options
@kube_options
def pin(workload: str | None, selector: str | None, node: str, gpus: tuple[str, ...], **kw: Any) -> None:
    """Pin the next pod of a workload to a node and exact GPUs.

    Creates a HamiPodPlacement selecting the workload's pods (with its own selector), so the next
    pod it creates lands on NODE with exactly these GPUs. Nothing running is touched; use `move`
    to move a running pod.

    \b
    Examples:
      kubectl hami-place pin deploy/trainer --node gpu-node-3 --gpu gpu-0 --gpu gpu-1
      kubectl hami-place pin sts/infer -n ml --node gpu-node-1 --gpu gpu-2/50 -w
      kubectl hami-place pin -l app=notebook --node gpu-node-2 --gpu gpu-0/25 --req-id nb-2024-01
      kubectl hami-place pin deploy/trainer --node gpu-node-3 --gpu gpu-0 --dry-run=client -o yaml
    """
    from hami_place_core import placement as hp
    from kubectl_hami_place.workloads import resolve_workload

    kube = _kube(kw)
    ns = kube.effective_namespace()
    wl = resolve_workload(kube, ns, workload, selector)
    target = _check_target(kube, node, gpus)
    req_id = kw["req_id"] or hp.new_req_id()
    name = kw["placement_name"] or hp.placement_name(wl.stem, req_id)
    manifest = placement_manifest(ns, name, req_id, wl.selector, node, gpus, None)
    dry_run = None if kw["dry_run"] == "none" else kw["dry_run"]
    obj = manifest if dry_run == "client" else create_placement(kube, manifest, dry_run)
    with _created(ns, name, dry_run):
        _announce(obj, f"pins {wl.description}", target, dry_run, kw["output"])
        if kw["watch"] and not dry_run:
            follow_placement(kube, ns, name, kw, kw["timeout"])


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
    from hami_place_core import placement as hp
    from hami_place_core.targets import TargetError

    try:
        manifest = hp.new_placement(ns, name, req_id, selector, node, list(gpus), evict, strategy=strategy)
    except TargetError as e:
        raise UserError(str(e)) from e
    if evict and eviction_timeout:
        manifest["spec"]["timeouts"] = {"evictionSeconds": max(1, round(eviction_timeout))}
    return manifest


def _move(pod_name: str, node: str, gpus: tuple[str, ...], evict: bool, wait: bool, kw: dict[str, Any]) -> None:
    from hami_place_core import placement as hp
    from kubectl_hami_place.workloads import get_pod, pod_workload

    kube = _kube(kw)
    ns = kube.effective_namespace()
    pod = get_pod(kube, ns, pod_name)
    strategy = STRATEGIES[kw.get("strategy") or "evict"]
    if strategy == hp.SURGE:
        refuse_surge(pod)
    wl = pod_workload(kube, pod)
    if not any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or ()):
        if evict:
            raise UserError(
                f"pod {ns}/{pod_name} has no controller to recreate it, so evicting it would lose it; "
                "recreate it yourself with a pin, or pin its workload"
            )
        raise UserError(
            f"pod {ns}/{pod_name} has no controller, so no replacement will ever be created to claim this "
            "placement; recreate the pod yourself after `pin -l` with its labels"
        )
    if not gpus:
        node, gpus = _current_target(kube, pod)
    count_note = _gpu_count_note(pod, gpus, kw.get("change_gpu_count", False))
    target = _check_target(kube, node, gpus)
    req_id = kw["req_id"] or hp.new_req_id()
    name = kw["placement_name"] or hp.placement_name(wl.stem, req_id)
    manifest = placement_manifest(
        ns, name, req_id, wl.selector, node, gpus, pod_name if evict else None, kw.get("eviction_timeout"), strategy
    )
    dry_run = None if kw["dry_run"] == "none" else kw["dry_run"]
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
        _announce(obj, what, target, dry_run, kw["output"])
        if wait and not dry_run:
            follow_placement(kube, ns, name, kw, kw["timeout"])


def _what_moves(pod: str, strategy: str, description: str) -> str:
    if strategy == "Surge":
        return f"starts one more replica of {description} on the target, then removes pod {pod} once it is Ready"
    if strategy == "Auto":
        return f"surges where safe (else evicts pod {pod}, PDBs respected); {description} lands on the target"
    return f"evicts pod {pod} (PDBs respected); {description} lands on the target"


def refuse_surge(pod: dict[str, Any]) -> None:
    """What the agent would refuse at once (not a Deployment's or ReplicaSet's pod), said here."""
    from hami_place_core import surge

    try:
        surge.refuse_owner(pod)
    except surge.SurgeRefused as e:
        raise UserError(str(e)) from e


def _gpu_count_note(pod: dict[str, Any], gpus: tuple[str, ...], allowed: bool) -> str:
    """A placement gives the replacement one GPU per gpuDevices entry: refuse a different count
    than the pod's own unless asked (--change-gpu-count), and then say so."""
    from hami_place_core.requests import pod_request

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


def _current_target(kube: Any, pod: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The node and GPU indices the pod has now, from HAMi's allocation and the node's inventory."""
    from hami_place_core.state import node_state, pod_allocation

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


@click.command()
@click.argument("pod")
@target_options()
@click.option("--evict", is_flag=True, help="Evict the pod now (respecting PDBs) so its controller recreates it there.")
@strategy_option("Move now, this way:")
@click.option(
    "--change-gpu-count",
    is_flag=True,
    help="Let the replacement have as many GPUs as --gpu names even if the pod has another count.",
)
@click.option(
    "--timeout",
    type=Duration(),
    default=DEFAULT_MOVE_TIMEOUT,
    show_default=True,
    metavar="DURATION",
    help="Stop following after this long (exit 1); the placement stays and can be followed with status -w.",
)
@click.option("--no-wait", is_flag=True, help="Create the placement and return; follow later with status -w.")
@eviction_timeout_option("Fail the move if PDBs keep blocking the eviction this long (agent default 5m).")
@_name_options
@_dry_run_option
@create_output_option
@agent_options
@kube_options
def move(pod: str, node: str, gpus: tuple[str, ...], evict: bool, no_wait: bool, **kw: Any) -> None:
    """Move a running pod to a node and exact GPUs.

    Creates a placement that matches the pod's replacement (from its controller's selector). With
    --evict the agent evicts the pod now, through the Eviction API so PodDisruptionBudgets hold,
    and the command streams progress until the replacement runs on the target: exit 0 on
    Completed, 1 on Failed or timeout. Without --evict the move happens when the pod next
    restarts. --strategy surge moves it without a gap: one more replica starts on the target,
    and the old pod is removed (and the replica count restored) once the new one is Ready.

    \b
    Examples:
      kubectl hami-place move trainer-7d9f-abcde --node gpu-node-3 --gpu gpu-0 --evict
      kubectl hami-place move infer-0 -n ml --node gpu-node-1 --gpu gpu-1/50 --evict --timeout 5m
      kubectl hami-place move web-5c8d-x2k4q --node gpu-node-2 --gpu gpu-0 --evict --eviction-timeout 2m
      kubectl hami-place move web-5c8d-x2k4q --node gpu-node-2 --gpu gpu-1 --strategy surge
      kubectl hami-place move trainer-7d9f-abcde --node gpu-node-2 --gpu gpu-3   # at next restart
    """
    now = evict or kw.get("strategy") is not None
    _move(pod, node, gpus, now, now and not no_wait, kw)


@click.command()
@click.argument("pod")
@target_options(required=False)
@click.option(
    "--timeout",
    type=Duration(),
    default=DEFAULT_MOVE_TIMEOUT,
    show_default=True,
    metavar="DURATION",
    help="Stop following after this long (exit 1); the placement stays and can be followed with status -w.",
)
@click.option("--no-wait", is_flag=True, help="Create the placement and return; follow later with status -w.")
@eviction_timeout_option("Fail the move if PDBs keep blocking the eviction this long (agent default 5m).")
@_name_options
@_dry_run_option
@create_output_option
@agent_options
@kube_options
def evict(pod: str, node: str | None, gpus: tuple[str, ...], no_wait: bool, **kw: Any) -> None:
    """Evict a pod safely, and wait for its replacement.

    The agent checks that a controller will recreate the pod, respects PodDisruptionBudgets, and
    pins the replacement: to --node/--gpu when given, otherwise back onto the pod's current node
    and GPUs (a safe restart that keeps its place).

    \b
    Examples:
      kubectl hami-place evict trainer-7d9f-abcde
      kubectl hami-place evict trainer-7d9f-abcde --node gpu-node-2 --gpu gpu-1
    """
    if bool(node) != bool(gpus):
        raise click.UsageError("give --node and --gpu together, or neither")
    _move(pod, node or "", gpus, True, not no_wait, kw)


@click.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Also cancel a placement already claimed by a pod or mid-move.")
@kube_options
def cancel(name: str, force: bool, **kw: Any) -> None:
    """Withdraw a placement that has not been consumed yet.

    Deletes it with a resourceVersion precondition, so a pod that claims it at the same moment
    wins and the command says so. A placement already claimed, or mid-move (its pod evicted), is
    only cancelled with --force: the replacement then schedules wherever HAMi puts it.

    \b
    Examples:
      kubectl hami-place cancel web-3fa9c2d1e0 -n ml
      kubectl hami-place cancel trainer-7d9f-abcde-1a2b3c4d5e --force
    """
    from hami_place_core import placement as hp
    from hami_place_core.kube import errors as kube_errors

    if kw.get("all_namespaces"):
        raise click.UsageError("cancel withdraws one placement: name its namespace with -n, not -A")
    kube = _kube(kw)
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
