"""`kubectl hami-place pin`: a placement for the next pod of a workload, on a node and exact GPUs."""

from __future__ import annotations

import click

from kubectl_hami_place.ops.args import AgentOptions, KubeOptions, PinOptions, PlacementFlags
from kubectl_hami_place.options import (
    Duration,
    agent_options,
    create_output_option,
    dry_run_option,
    kube_options,
    name_options,
    selector_option,
    target_options,
    watch_option,
)


@click.command()
@click.argument("workload", required=False, metavar="[deploy/NAME | sts/NAME | rs/NAME]")
@selector_option("Pin the next pod matching this selector instead of a workload's (e.g. -l app=web).")
@target_options()
@name_options
@dry_run_option
@watch_option("Follow the placement until the pod is placed (Completed) or it fails.")
@click.option("--timeout", type=Duration(), metavar="DURATION", help="With -w: give up after this long (e.g. 5m).")
@create_output_option
@agent_options
@kube_options
def pin(
    workload: str | None,
    selector: str | None,
    node: str,
    gpus: tuple[str, ...],
    placement_name: str | None,
    req_id: str | None,
    dry_run: str,
    watch: bool,
    timeout: float | None,
    output: str,
    agent_namespace: str,
    agent_service: str | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
) -> None:
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
    from kubectl_hami_place.ops.placements import pin as run

    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    flags = PlacementFlags(placement_name, req_id, dry_run, output, AgentOptions(agent_namespace, agent_service), kube)
    run(PinOptions(workload, selector, node, gpus, watch, timeout, flags))
