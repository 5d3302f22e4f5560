"""`kubectl hami-place defrag --apply`: execute the planner's moves one at a time, re-planning from
the live cluster after each, through the same placements (with evictPod) as `move --evict`."""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from kubectl_hami_place.errors import UserError
from kubectl_hami_place.moves import describe_move, execute_move, namespace_only
from kubectl_hami_place.options import (
    Duration,
    agent_options,
    eviction_timeout_option,
    kube_options,
    planner_options,
    selector_option,
    strategy_option,
)
from kubectl_hami_place.printers import counted, warn_if_exact_skipped
from kubectl_hami_place.quiet import stdout_to_stderr

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
    max_moves: int,
    excluded: tuple[str, ...],
    selector: str | None,
    for_pod: str | None = None,
    **kw: Any,
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
    from dataclasses import replace

    from hami_place_core.planning import PlanOptions, SolverUnavailable, plan
    from hami_place_core.planning.exact import ABSENT
    from kubectl_hami_place.inspect_cmd import live_state
    from kubectl_hami_place.kube import Kube

    kube = Kube(kw["kubeconfig"], kw["context"], kw["namespace"], False, kw["request_timeout"])
    if for_pod is not None:
        from kubectl_hami_place.room import defrag_for

        defrag_for(kube, for_pod, do_apply, max_moves, excluded, selector, kw)
        return
    base = PlanOptions(
        objective=objective,  # type: ignore[arg-type]
        excluded_namespaces=frozenset({"kube-system", *excluded}),
        max_moves_per_workload=kw["max_moves_per_workload"],
        solver=kw["solver"],
    )
    scope = None if kw["all_namespaces"] else kw["namespace"]  # -n: only that namespace's pods move
    try:
        state = live_state(kube, selector)
        with stdout_to_stderr():  # a solver's banner is not defrag's output
            start = plan(state, replace(base, max_moves=max_moves, kept_pods=namespace_only(state.pods, scope)))
    except SolverUnavailable as e:
        raise UserError(str(e)) from e
    if start.solver_note == ABSENT:
        click.echo(f"note: {ABSENT}", err=True)  # the plan is the greedy planner's; say why
    warn_if_exact_skipped(kw["solver"], start.solver_note)
    click.echo(
        f"plan ({objective}): {counted(len(start.moves), 'move')}; whole GPUs free {start.before.whole_free} -> "
        f"{start.after.whole_free}, FGD {start.before.fgd:.2f} -> {start.after.fgd:.2f}"
    )
    if not do_apply:
        for i, m in enumerate(start.moves, 1):
            click.echo(f"  {i}. {describe_move(m)}")
        click.echo("dry run: nothing changed; run with --apply to execute" if start.moves else "nothing to do")
        return
    used: Counter[str] = Counter()
    done = 0
    try:
        while done < max_moves:
            state = live_state(kube, selector, warn=False)
            options = replace(
                base,
                max_moves=max_moves - done,
                workload_moves_used=dict(used),
                kept_pods=namespace_only(state.pods, scope),
            )
            with stdout_to_stderr():
                current = plan(state, options)
            if not current.moves:
                break
            m = current.moves[0]
            click.echo(f"move {done + 1}: {describe_move(m)}")
            execute_move(kube, m, kw)
            used[m.workload or m.pod] += 1
            done += 1
    except UserError as e:
        _summary(kube, start, done, selector)
        raise UserError(f"defrag stopped at move {done + 1}: {e}") from e
    _summary(kube, start, done, selector)


def _summary(kube: Any, start: Any, done: int, selector: str | None) -> None:
    from hami_place_core.fragmentation import cluster_metrics, mix_from_state
    from kubectl_hami_place.inspect_cmd import live_state

    state = live_state(kube, selector, warn=False)
    now = cluster_metrics(state, mix_from_state(state)).total
    click.echo(
        f"done: {counted(done, 'move')}; whole GPUs free {start.before.whole_free} -> {now.whole_free}, "
        f"FGD {start.before.fgd:.2f} -> {now.fgd:.2f}"
    )
