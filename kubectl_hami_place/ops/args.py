"""What a command hands to ops/: one immutable options record per verb, built from its click parameters.

A command module imports this at its top, so it holds typed records and nothing else: `CMD --help`
and the completion of a command's flags import click and this, never the Kubernetes client or the
planner (the CLI's lazy imports are listed in tests/unit/test_cli_layout.py). Each field is a
flag's value, as click parsed it. NamedTuples rather than frozen dataclasses: twelve of those took
6 ms to create at every start (their methods are generated with exec), twelve NamedTuples 1 ms.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:  # a type only: importing the model would cost every `--help` its start-up
    from hami_place_core.capacity import Demand


class KubeOptions(NamedTuple):
    """--kubeconfig, --context, -n/--namespace, -A/--all-namespaces, --request-timeout."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None
    all_namespaces: bool = False
    request_timeout: float | None = None


class AgentOptions(NamedTuple):
    """--agent-namespace, --agent-service: where progress is read while a placement is followed."""

    namespace: str = "kube-system"
    service: str | None = None


class MoveSettings(NamedTuple):
    """How each planned move runs (`defrag`): its strategy, eviction timeout and follow timeout."""

    timeout: float | None
    eviction_timeout: float | None
    agent: AgentOptions
    strategy: str | None = None  # --strategy's lowercase choice; None means evict


class PlannerFlags(NamedTuple):
    """--objective, --solver, --max-moves-per-workload, --exclude-namespace, --demand (plan and defrag)."""

    objective: str
    solver: str
    max_moves_per_workload: int
    excluded: tuple[str, ...]
    demand: Demand | None = None  # --demand, parsed; None: the pending pods, else the running mix


class InspectOptions(NamedTuple):
    nodes: tuple[str, ...]
    selector: str | None
    output: str
    no_headers: bool
    show_heatmap: bool
    snapshot: str | None
    kube: KubeOptions


class PlacementFlags(NamedTuple):
    """What every command that creates a placement shares: its name, reqID, dry run and output."""

    placement_name: str | None
    req_id: str | None
    dry_run: str  # none, client or server
    output: str
    agent: AgentOptions
    kube: KubeOptions


class PinOptions(NamedTuple):
    workload: str | None
    selector: str | None
    node: str
    gpus: tuple[str, ...]
    watch: bool
    timeout: float | None
    placement: PlacementFlags


class MoveOptions(NamedTuple):
    """`move` and `evict`: `evict` moves now; `wait` follows the placement until it ends."""

    pod: str
    node: str
    gpus: tuple[str, ...]
    evict: bool
    wait: bool
    timeout: float | None
    eviction_timeout: float | None
    placement: PlacementFlags
    strategy: str | None = None
    change_gpu_count: bool = False


class CancelOptions(NamedTuple):
    name: str
    force: bool
    kube: KubeOptions


class ListOptions(NamedTuple):
    """`status` and `policies`: a NAME or all, a selector, -w, -o, --no-headers, --sort-by."""

    name: str | None
    selector: str | None
    watch: bool
    output: str
    no_headers: bool
    sort_by: str | None
    kube: KubeOptions


class PlanOptions(NamedTuple):
    """`plan`: `for_pod` (--for) or `for_request` (--for-request) plans room for one pod instead."""

    planner: PlannerFlags
    max_moves: int | None
    max_moves_per_gpu: int
    output: str
    max_rows: int | None
    snapshot: str | None
    selector: str | None
    kube: KubeOptions
    for_pod: str | None = None
    for_request: str | None = None
    report: str | None = None

    @property
    def for_one_pod(self) -> bool:
        return self.for_pod is not None or self.for_request is not None


class DefragOptions(NamedTuple):
    """`defrag`: without `apply` the plan only; with `for_pod` room for that pending pod."""

    apply: bool
    planner: PlannerFlags
    max_moves: int
    selector: str | None
    moves: MoveSettings
    kube: KubeOptions
    for_pod: str | None = None
