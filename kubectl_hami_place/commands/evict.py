"""`kubectl hami-place evict`: evict a pod safely, and wait for its replacement."""

from __future__ import annotations

import click

from kubectl_hami_place.ops.args import AgentOptions, KubeOptions, MoveOptions, PlacementFlags
from kubectl_hami_place.options import (
    DEFAULT_MOVE_TIMEOUT,
    Duration,
    agent_options,
    create_output_option,
    dry_run_option,
    eviction_timeout_option,
    kube_options,
    name_options,
    target_options,
)


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
@name_options
@dry_run_option
@create_output_option
@agent_options
@kube_options
def evict(
    pod: str,
    node: str | None,
    gpus: tuple[str, ...],
    timeout: float | None,
    no_wait: bool,
    eviction_timeout: float | None,
    placement_name: str | None,
    req_id: str | None,
    dry_run: str,
    output: str,
    agent_namespace: str,
    agent_service: str | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
) -> None:
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
    from kubectl_hami_place.ops.placements import move as run

    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    flags = PlacementFlags(placement_name, req_id, dry_run, output, AgentOptions(agent_namespace, agent_service), kube)
    run(MoveOptions(pod, node or "", gpus, True, not no_wait, timeout, eviction_timeout, flags))
