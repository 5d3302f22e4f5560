"""`defrag`: plan the moves that free whole GPUs and, with --apply, execute them one at a time,
re-planning from the live cluster after each, through the same placements (with evictPod) as
`move --evict`."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import click

from hami_place_core import planning
from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.planning import Plan, SolverUnavailable
from hami_place_core.planning import PlanOptions as PlannerOptions
from hami_place_core.planning.exact import ABSENT
from hami_place_core.state import build_state
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops.args import DefragOptions
from kubectl_hami_place.ops.cluster import connect, live_state, load_cluster, warn_unreadable
from kubectl_hami_place.ops.moves import describe_move, execute_move, namespace_only
from kubectl_hami_place.ops.plan import demand_for, warn_if_exact_skipped
from kubectl_hami_place.ops.render import demand_line
from kubectl_hami_place.ops.room import defrag_for
from kubectl_hami_place.printers import counted
from kubectl_hami_place.quiet import stdout_to_stderr


def defrag(options: DefragOptions) -> None:
    """The plan; with `apply` its moves, one at a time, each re-planned from the live cluster."""
    kube = connect(options.kube._replace(all_namespaces=False))
    if options.for_pod is not None:
        defrag_for(kube, options.for_pod, options)
        return
    flags = options.planner
    base = PlannerOptions(
        objective=flags.objective,  # type: ignore[arg-type]
        excluded_namespaces=frozenset({"kube-system", *flags.excluded}),
        max_moves_per_workload=flags.max_moves_per_workload,
        solver=flags.solver,  # type: ignore[arg-type]
    )
    k = options.kube
    scope = None if k.all_namespaces else k.namespace  # -n: only that namespace's pods move
    try:
        nodes, pods = load_cluster(kube, options.selector)
        state = build_state(nodes, pods)
        warn_unreadable(state)
        base = replace(base, demand=demand_for(state, pods, flags.demand))
        kept = namespace_only(state.pods, scope)
        with stdout_to_stderr():  # a solver's banner is not defrag's output
            start = planning.plan(state, replace(base, max_moves=options.max_moves, kept_pods=kept))
    except SolverUnavailable as e:
        raise UserError(str(e)) from e
    if start.solver_note == ABSENT:
        click.echo(f"note: {ABSENT}", err=True)  # the plan is the greedy planner's; say why
    warn_if_exact_skipped(flags.solver, start.solver_note)
    click.echo(
        f"plan ({flags.objective}): {counted(len(start.moves), 'move')}; whole GPUs free "
        f"{start.before.whole_free} -> {start.after.whole_free}, FGD {start.before.fgd:.2f} -> {start.after.fgd:.2f}"
    )
    room = demand_line(start)
    if room:
        click.echo(room)
    if not options.apply:
        for i, m in enumerate(start.moves, 1):
            click.echo(f"  {i}. {describe_move(m)}")
        click.echo("dry run: nothing changed; run with --apply to execute" if start.moves else "nothing to do")
        return
    _apply(kube, options, base, scope, start)


def _apply(kube: Kube, options: DefragOptions, base: PlannerOptions, scope: str | None, start: Plan) -> None:
    """Each move in turn, the next one planned from the cluster the last one left; the first
    failure stops the run, after a summary."""
    used: Counter[str] = Counter()
    done = 0
    try:
        while done < options.max_moves:
            state = live_state(kube, options.selector, warn=False)
            planner = replace(
                base,
                max_moves=options.max_moves - done,
                workload_moves_used=dict(used),
                kept_pods=namespace_only(state.pods, scope),
            )
            with stdout_to_stderr():
                current = planning.plan(state, planner)
            if not current.moves:
                break
            m = current.moves[0]
            click.echo(f"move {done + 1}: {describe_move(m)}")
            execute_move(kube, m, options.moves)
            used[m.workload or m.pod] += 1
            done += 1
    except UserError as e:
        _summary(kube, start, done, options.selector)
        raise UserError(f"defrag stopped at move {done + 1}: {e}") from e
    _summary(kube, start, done, options.selector)


def _summary(kube: Kube, start: Plan, done: int, selector: str | None) -> None:
    state = live_state(kube, selector, warn=False)
    now = cluster_metrics(state, mix_from_state(state)).total
    click.echo(
        f"done: {counted(done, 'move')}; whole GPUs free {start.before.whole_free} -> {now.whole_free}, "
        f"FGD {start.before.fgd:.2f} -> {now.fgd:.2f}"
    )
