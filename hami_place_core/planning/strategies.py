"""The greedy planner's two objectives, as sequences of passes over one engine.

The plan frees whole GPUs or lowers FGD. Input is a :class:`~hami_place_core.state.ClusterState`
(live, or read from a snapshot); output the moves of a
:class:`~hami_place_core.planning.model.Plan`, valid one after another: each move evicts a pod and
pins its replacement (a HamiPodPlacement with ``evictPod``) to GPUs where HAMi's Fit
(:func:`hami_place_core.fit.gpu_fit_reason`) holds in the state left by the moves before it, with
the pod's own request, GPU-type and UUID selectors, on a node kube-scheduler would accept
(:mod:`hami_place_core.planning.constraints`). No GPU is ever oversubscribed, even between moves.

**Algorithm (objective ``free-gpus``).** A GPU counts as freed when every pod on it has left,
so emptying one costs at least one move per pod on it. Candidates (GPUs whose pods may all move;
never GPUs of exclusive pods, which would only trade one whole GPU for another) are taken
cheapest first: fewest pods, then the lightest GPU, then GPUs of nodes short of CPU or memory
(a roomy node's GPUs are worth more as targets), then the lightest node. A candidate's pods,
largest first, each go best-fit into a GPU that stays in use: the one left with the least free
compute that still passes Fit (among equals the pod's own node, then GPUs already receiving,
then the busiest). The evacuation is committed only if *all* its pods fit, else nothing moves.
Passes by cost: with budget B = 1, 2, ... ``max_moves_per_gpu`` moves, every candidate with at
most B pods to move is tried once; the moves beyond its own pods go to *ejection chains* (up to
MAX_DEPTH deep): a pod that fits nowhere takes the place of up to two smaller pods on a nearly
fitting GPU, and they move on first, recursively. So all one-move frees come before the two-move
ones, and so on. In these passes a pod moves once and a GPU that received a pod is never emptied.
Every target node must have the CPU, memory and pod slot the pod requests (kube-scheduler's
NodeResourcesFit). Before the passes, a node whose GPU room no pod can use for want of CPU or
memory sends one exclusive pod to an empty GPU of a roomy node, carrying its CPU and memory over (a
*node-room exchange*, :mod:`~hami_place_core.planning.exchange`: one GPU freed, one taken); after
the first round every exchange whose room nothing used is taken back.
Where nodes are still short of it, two steps follow: single moves of small pods into
other GPUs' free compute, kept only where they empty a GPU or make the room another free needs; and
GPUs of one or two pods that could not be emptied are emptied together into an empty GPU of a roomy
node, k of them freeing k - 1 GPUs (first fit decreasing; the first such move ``takes`` the GPU it
opens).
A last round repeats the passes with both allowed: a pod already moving may get another place at
no extra move (or go home, saving one). Then an empty GPU of a roomy node may be offered as a
target to a few more evacuations, kept where two GPUs or more empty
(:func:`~hami_place_core.planning.passes.seeded`), and several at once, taken one after another
by GPUs that empty into them until one GPU more is emptied than taken
(:func:`~hami_place_core.planning.chains.seed_chains`). Finally the moves are put in an order where
each one fits when made, the cheapest frees first (each time a GPU whose remaining pods can all
move now, fewest first; else the first move, in the order the places were chosen, that fits):
every prefix of the plan is valid and frees about as much as its moves can. If no such order
exists, the plan of the first round is kept.

**Objective ``fragmentation``.** The same evacuations, committed only when they lower the FGD
fragmentation of the workload mix (:mod:`hami_place_core.fragmentation`) by at least
``min_fgd_gain`` GPU per move; then single moves of small pods into other GPUs' free compute
where that alone lowers FGD by at least as much.

Deterministic: GPUs and pods are visited in sorted order, ties broken by node name and GPU index.
A caller that applies moves one at a time (``defrag --apply``) should re-plan from the live state
after each move and take ``Plan.moves[0]``, passing the moves already made per workload
in ``PlanOptions.workload_moves_used`` so disruption limits hold across re-plans.
"""

from __future__ import annotations

from hami_place_core.fragmentation import WorkloadMix
from hami_place_core.planning.chains import seed_chains
from hami_place_core.planning.engine import Engine, Record
from hami_place_core.planning.evacuation import EJECT_SCAN, MAX_DEPTH
from hami_place_core.planning.exchange import carries, keep_used
from hami_place_core.planning.fgd import EngineFgd
from hami_place_core.planning.model import Move, PlanOptions
from hami_place_core.planning.ordering import sequence
from hami_place_core.planning.passes import evacuations, fresh_gpus, seeded, single_moves


def free_gpus(engine: Engine, options: PlanOptions, mix: WorkloadMix) -> list[Move]:
    carried = carries(engine, options)
    evacuations(engine, options, None)
    # Where nodes are short of CPU or memory, many GPUs cannot be emptied all at once, but single
    # moves into other GPUs' slack (each lowering FGD) still empty some, and GPUs of one or two
    # pods can empty together into an empty GPU of a roomy node: on the openb example the
    # evacuations free 100 GPUs, single moves 54 more, pairing 26 and the second phase 14.
    fgd = EngineFgd(engine, mix)
    single_moves(engine, options, fgd, {n: fgd.node(n) for n in engine.node_gids}, only_frees=True)
    fresh_gpus(engine)
    keep_used(engine, carried)
    # The first phase's plan is ordered only if it is the answer: a third of the ordering's time.
    places, events = engine.snapshot(), list(engine.p_event)
    # Second phase: pods already moving may be given another place at no extra move, and GPUs
    # that received pods may be emptied after all; ordering is redone at the end.
    engine.allow_reroutes()
    # The second phase gains little (nothing on most states) but can search far longer than the
    # first when node CPU and memory are tight: it may scan a quarter as many GPUs as the first
    # did (half freed no more GPUs over the seven openb states, an eighth 21 fewer), and at least
    # what one evacuation may, so a first phase that needed no scan leaves room.
    engine.limit_scans(max(engine.scanned // 4, EJECT_SCAN * MAX_DEPTH))
    freed = len(engine.evacuated)
    evacuations(engine, options, None)
    engine.allow_reroutes(False)
    seeded(engine, options)
    seed_chains(engine, options)
    if len(engine.evacuated) > freed:
        second = sequence(engine)
        if second is not None:
            return second
    # Nothing more freed (every later try was rolled back), or no order makes every step of the
    # second phase's plan fit: the first phase's plan.
    engine.restore(places, events)
    first = sequence(engine)
    assert first is not None  # built move by move, so the build order itself is valid
    return first


def fragmentation(engine: Engine, options: PlanOptions, mix: WorkloadMix) -> list[Move]:
    fgd = EngineFgd(engine, mix)
    committed = {n: fgd.node(n) for n in engine.node_gids}

    def accept(records: list[Record], x: int) -> bool:
        touched = sorted({engine.g_node[g] for p, old, _, _ in records for g in (*old, *engine.p_gids[p])})
        after = {n: fgd.node(n) for n in touched}
        moves = sum(1 for p in {r[0] for r in records} if engine.moved(p))
        if sum(committed[n] - after[n] for n in touched) < options.min_fgd_gain * max(1, moves):
            return False
        committed.update(after)
        return True

    evacuations(engine, options, accept)
    fresh_gpus(engine, accept=accept)
    single_moves(engine, options, fgd, committed)
    moves = sequence(engine)
    assert moves is not None  # built move by move, so the build order itself is valid
    return moves
