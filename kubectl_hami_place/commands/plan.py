"""`kubectl hami-place plan`: the moves that would defragment the cluster, changing nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kubectl_hami_place.ops.args import KubeOptions, PlannerFlags, PlanOptions
from kubectl_hami_place.options import kube_options, output_formats, planner_options, selector_option

if TYPE_CHECKING:
    from hami_place_core.capacity import Demand

PLAN_OUTPUTS = ("table", "json", "yaml")


def _check_report(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """--report's format follows its extension: anything but .html or .svg is a usage error."""
    if value is None:
        return value
    from kubectl_hami_place.ops.report import FORMATS, report_format

    if report_format(value) is None:
        raise click.BadParameter(f"{value!r}: the file name must end in {' or '.join(FORMATS)}", ctx, param)
    return value


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
    help="Instead: the fewest moves after which this Pending pod (in -n's namespace) fits, and where it goes; "
    "or, as KIND/NAME, every waiting member of a gang at once (podgroup/NAME: Kubernetes' PodGroup, "
    "scheduler-plugins' or Volcano's; job/, jobset/, lws/, workload/).",
)
@click.option(
    "--for-request",
    metavar="SPEC",
    help="Instead: the fewest moves after which a pod asking for SPEC fits, e.g. "
    "gpus=4,gpumem-percentage=50,type=A100,node-selector=pool=a (keys: gpus, gpumem, gpumem-percentage, "
    "gpucores, type, nouse-type, uuid, nouse-uuid, node-selector, toleration, cpu, memory; pods=N: a gang of N "
    "such pods that must all fit at once).",
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
    demand: Demand | None,
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
      kubectl hami-place plan --snapshot example --for-request gpus=8,pods=4   # a gang: all at once
      kubectl hami-place plan --for podgroup/train -n ml  # every waiting member of a gang
      kubectl hami-place plan --snapshot example --report plan.html   # the before/after heatmap
    """
    from kubectl_hami_place.ops.plan import plan as run

    planner = PlannerFlags(objective, solver, max_moves_per_workload, excluded, demand)
    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    run(
        PlanOptions(
            planner,
            max_moves,
            max_moves_per_gpu,
            output,
            max_rows,
            snapshot,
            selector,
            kube,
            for_pod,
            for_request,
            report,
        )
    )
