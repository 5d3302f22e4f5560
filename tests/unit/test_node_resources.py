"""Node CPU, memory and pod slots: kube-scheduler's request rules, the state's per-node tally, and
plans that never overcommit a node (checked here from the raw snapshot, not through the model)."""

from __future__ import annotations

from typing import Any

import pytest

from hami_place_core.examples import resolve_snapshot
from hami_place_core.node_resources import Resources, node_allocatable, pod_requests
from hami_place_core.planning import PlanOptions, check_moves, plan
from hami_place_core.quantity import QuantityError, as_int64, parse_quantity, value_ceil
from hami_place_core.snapshot import load_snapshot
from hami_place_core.state import build_state, delete_pod, upsert_pod


def _pod(containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": containers, **spec}}


def _c(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return {"name": "c", "resources": resources, **extra}


def test_app_containers_sum_and_a_limit_stands_for_a_missing_request() -> None:
    r = pod_requests(_pod([_c({"cpu": "500m", "memory": "1Gi"}), _c(limits={"cpu": "1", "memory": "512Mi"})]))
    assert r == Resources(1500, (1 << 30) + (512 << 20), 1)


def test_init_containers_take_the_max_and_sidecars_add_up() -> None:
    spec = {
        "initContainers": [
            _c({"cpu": "4"}),  # plain init: alone, larger than the app containers
            _c({"cpu": "100m"}, restartPolicy="Always"),  # sidecar: runs with the app containers
            _c({"cpu": "3"}),  # plain init after the sidecar: 3 + 0.1
        ],
        "overhead": {"cpu": "10m"},
    }
    assert pod_requests(_pod([_c({"cpu": "500m"})], **spec)).cpu == 4000 + 10
    spec["initContainers"] = [_c({"cpu": "100m"}, restartPolicy="Always")]
    assert pod_requests(_pod([_c({"cpu": "500m"})], **spec)).cpu == 600 + 10


def test_pod_level_requests_win_and_fractions_round_up() -> None:
    r = pod_requests(_pod([_c({"cpu": "8", "memory": "1Gi"})], resources={"requests": {"cpu": "2"}}))
    assert (r.cpu, r.memory) == (2000, 1 << 30)
    assert pod_requests(_pod([_c({"cpu": "0.0001"})])).cpu == 1  # MilliValue rounds up


def test_a_node_without_allocatable_never_refuses() -> None:
    assert node_allocatable({"status": {}}) is None
    alloc = node_allocatable({"status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}})
    assert alloc == Resources(64000, 512 << 30, 110)


def test_shortfall_names_each_missing_resource() -> None:
    why = Resources(1000, 1 << 30, 1).shortfall(Resources(2500, 3 << 30, 2))
    assert why == (
        "Too many pods, Insufficient cpu (1 free, 2500m requested), Insufficient memory (1Gi free, 3Gi requested)"
    )
    assert Resources(1000, 1 << 30, 1).shortfall(Resources(1000, 1 << 30, 1)) is None


def test_the_state_counts_every_pod_on_its_node_and_forgets_deleted_ones() -> None:
    node = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "10"}}}
    cpu_only = _pod([_c({"cpu": "3", "memory": "4Gi"})], nodeName="n1")
    done = {**_pod([_c({"cpu": "3"})], nodeName="n1"), "status": {"phase": "Succeeded"}}
    done["metadata"] = {"name": "done", "namespace": "ns"}
    s = build_state([node], [cpu_only, done])
    assert s.free_resources("n1") == Resources(5000, 12 << 30, 9)
    upsert_pod(s, cpu_only)  # an update counts once
    assert s.free_resources("n1") == Resources(5000, 12 << 30, 9)
    delete_pod(s, "ns/p")
    assert s.free_resources("n1") == Resources(8000, 16 << 30, 10)


def test_no_move_of_the_example_plan_overcommits_its_target_node() -> None:
    """The raw check: allocatable minus the requests of the pods the snapshot puts on each node,
    replayed move by move (a GPU-only plan of this state overcommitted 222 of its 431 targets)."""
    nodes, pods, _ = load_snapshot(resolve_snapshot("example"))
    free: dict[str, list[Any]] = {}
    for n in nodes:
        a = n["status"]["allocatable"]
        free[n["metadata"]["name"]] = [parse_quantity(a["cpu"]), parse_quantity(a["memory"])]
    need: dict[str, tuple[Any, Any]] = {}
    for p in pods:
        req = p["spec"]["containers"][0]["resources"].get("requests", {})
        cpu, mem = parse_quantity(req.get("cpu", "0")), parse_quantity(req.get("memory", "0"))
        where = p["spec"].get("nodeName") or p["metadata"]["annotations"]["hami.io/vgpu-node"]
        free[where][0] -= cpu
        free[where][1] -= mem
        need[f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = (cpu, mem)
    state = build_state(nodes, pods)
    result = plan(state, PlanOptions())
    assert result.moves and not check_moves(state, list(result.moves))
    for m in result.moves:
        cpu, mem = need[m.pod]
        if m.to_node != m.from_node:
            free[m.from_node][0] += cpu
            free[m.from_node][1] += mem
            free[m.to_node][0] -= cpu
            free[m.to_node][1] -= mem
            assert free[m.to_node][0] >= 0 and free[m.to_node][1] >= 0, m


def test_check_moves_names_the_node_that_lacks_cpu() -> None:
    nodes, pods, _ = load_snapshot(resolve_snapshot("example"))
    state = build_state(nodes, pods)
    m = next(m for m in plan(state, PlanOptions()).moves if m.to_node != m.from_node)
    assert not check_moves(state, [m])
    state.nodes[m.to_node].allocatable = Resources(0, 0, 0)  # the target node fills up meanwhile
    errors = check_moves(state, [m])
    assert any(f"node {m.to_node}: Too many pods, Insufficient cpu (0 free, " in e for e in errors), errors


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1e400", 2**63 - 1),  # apimachinery caps at 2^63-1; used to overflow the float math
        ("1e999999999", 2**63 - 1),  # used to raise decimal.Overflow
        ("9" * 5000, 2**63 - 1),  # used to raise ValueError (Python's int digit limit)
        ("-1e30", -(2**63 - 1)),
        ("0e99999999999999", 0),
        ("2Gi", 2**31),
    ],
)
def test_huge_quantities_are_capped_as_apimachinery_does(value: str, expected: int) -> None:
    assert value_ceil(value) == expected and as_int64(value) == expected


@pytest.mark.parametrize("value", ["١٠", "１０", "1_0", "0x10"])
def test_quantities_take_ascii_digits_only(value: str) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)
    assert as_int64(value) is None and value_ceil(value) is None
