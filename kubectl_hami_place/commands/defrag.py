"""`kubectl hami-place defrag`: plan moves that free whole GPUs and, with --apply, execute them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from kubectl_hami_place.ops.args import AgentOptions, DefragOptions, KubeOptions, MoveSettings, PlannerFlags
from kubectl_hami_place.options import (
    Duration,
    agent_options,
    eviction_timeout_option,
    kube_options,
    planner_options,
    selector_option,
    strategy_option,
)

if TYPE_CHECKING:
    from hami_place_core.capacity import Demand

DEFAULT_MAX_MOVES = 10


@click.command()
@click.option("--apply", "do_apply", is_flag=True, help="Execute the moves (without it: print the plan only).")
@planner_options
@click.option(
    "--max-moves",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_MOVES,
    show_default=True,
    metavar="N",
    help="Stop after this many.",
)
@click.option(
    "--timeout",
    type=Duration(),
    default="10m",
    show_default=True,
    metavar="DURATION",
    help="Per move: stop following after this long (exit 1; the placement stays).",
)
@eviction_timeout_option("Per move: fail it (and stop) if PDBs block its eviction this long (agent default 5m).")
@click.option(
    "--for",
    "for_pod",
    metavar="POD",
    help="Make room for this Pending pod (in -n's namespace) instead, then put it on the room made.",
)
@selector_option("Only nodes with these labels: defragment one node pool (e.g. -l pool=a100).")
@strategy_option("With --apply, how each move runs:", default="evict")
@agent_options
@kube_options
def defrag(
    do_apply: bool,
    objective: str,
    demand: Demand | None,
    solver: str,
    max_moves_per_workload: int,
    excluded: tuple[str, ...],
    max_moves: int,
    timeout: float | None,
    eviction_timeout: float | None,
    selector: str | None,
    strategy: str | None,
    agent_namespace: str,
    agent_service: str | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
    for_pod: str | None = None,
) -> None:
    """Defragment the cluster: plan moves that free whole GPUs, then execute them safely.

    With --apply, each move is a HamiPodPlacement with evictPod, executed by the agent (its rate
    limits, the PDBs and the controller checks hold), followed until Completed. After each move the
    plan is recomputed from the live cluster; the first failure stops the run with a summary.
    Without --apply it prints the plan and changes nothing. --strategy auto moves each pod of a
    Deployment or ReplicaSet without losing a replica (surge) and evicts the others; --strategy
    surge stops at the first pod that cannot surge.

    \b
    Examples:
      kubectl hami-place defrag                       # what would move (no changes)
      kubectl hami-place defrag --apply --max-moves 5
      kubectl hami-place defrag --apply --objective fragmentation --exclude-namespace prod
      kubectl hami-place defrag --apply --strategy auto   # no replica lost where a surge is safe
      kubectl hami-place defrag --for train-0 -n ml --apply   # make room for a Pending pod, then place it

    With --for, the moves are those of `plan --for` (re-planned from the live cluster after each);
    then the pending pod is evicted so that its controller recreates it pinned to the room made
    (a Pending pod has no running container to lose). A pod without a controller is never deleted:
    the room is made and the scheduler places it.
    """
    from kubectl_hami_place.ops.defrag import defrag as run

    moves = MoveSettings(timeout, eviction_timeout, AgentOptions(agent_namespace, agent_service), strategy)
    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    planner = PlannerFlags(objective, solver, max_moves_per_workload, excluded, demand)
    run(DefragOptions(do_apply, planner, max_moves, selector, moves, kube, for_pod))
