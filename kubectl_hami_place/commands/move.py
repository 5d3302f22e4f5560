"""`kubectl hami-place move`: move a running pod to a node and exact GPUs."""

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
    strategy_option,
    target_options,
)


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
@name_options
@dry_run_option
@create_output_option
@agent_options
@kube_options
def move(
    pod: str,
    node: str,
    gpus: tuple[str, ...],
    evict: bool,
    strategy: str | None,
    change_gpu_count: bool,
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
    from kubectl_hami_place.ops.placements import move as run

    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    flags = PlacementFlags(placement_name, req_id, dry_run, output, AgentOptions(agent_namespace, agent_service), kube)
    now = evict or strategy is not None  # a strategy means: move now
    wait = now and not no_wait
    run(MoveOptions(pod, node, gpus, now, wait, timeout, eviction_timeout, flags, strategy, change_gpu_count))
