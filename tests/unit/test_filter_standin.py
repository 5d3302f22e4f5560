"""The stand-in for HAMi's Filter (testbed/hami/filter_standin.py) judges nodes with the model of HAMi's
Fit and words a refusal as HAMi's ``common.GenReason`` does; an error lets every node pass."""

from __future__ import annotations

import json
from typing import Any

from hami_place_core import annotations as ann
from testbed.data.gpu_nodes import NodeSpec
from testbed.hami.filter_standin import FilterStandIn, filter_result, gen_reason
from testbed.hami.hami_pods import hami_pod

HALF = NodeSpec("half", gpus=4)  # every GPU half used
FREE = NodeSpec("free", gpus=2)
A100_MIB = 81920


def _pod(limits: dict[str, str] | None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"limits": limits} if limits else {}
    return {
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c", "resources": resources}]},
    }


def _cluster() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes = [HALF.manifest(), FREE.manifest(), {"metadata": {"name": "cpu-only"}, "status": {}}]
    pods = [hami_pod(f"half-{i}", "ns", "half", [(HALF.gpu_uuid(i), A100_MIB // 2, 50)]) for i in range(4)]
    return nodes, pods


def _filter(pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    nodes, pods = _cluster()
    return filter_result({"Pod": pod, "NodeNames": names}, nodes, pods)


def test_gen_reason_is_hamis_format() -> None:
    assert gen_reason({"CardInsufficientMemory": 3, "CardInsufficientCore": 1}, 4) == (
        "1/4 CardInsufficientCore, 3/4 CardInsufficientMemory"
    )


def test_two_whole_gpus_fit_no_half_used_gpu() -> None:
    out = _filter(_pod({"nvidia.com/gpu": "2"}), ["half", "free", "cpu-only"])
    assert out["NodeNames"] == ["free"]
    assert out["FailedNodes"] == {"half": "4/4 CardInsufficientMemory", "cpu-only": "node unregistered"}
    assert out["Error"] == ""


def test_two_half_gpus_fit_the_half_used_node() -> None:
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}
    assert _filter(_pod(limits), ["half"]) == {"NodeNames": ["half"], "FailedNodes": {}, "Error": ""}


def test_cores_and_count() -> None:
    limits = {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024", "nvidia.com/gpucores": "60"}
    assert _filter(_pod(limits), ["half"])["FailedNodes"] == {"half": "4/4 CardInsufficientCore"}
    assert _filter(_pod({"nvidia.com/gpu": "3"}), ["free"])["FailedNodes"] == {"free": "NodeInsufficientDevice"}


def test_selectors_are_honoured() -> None:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "50", "nvidia.com/gpucores": "50"}
    pinned = _pod(limits, {ann.USE_GPU_UUID: HALF.gpu_uuid(2)})
    out = _filter(pinned, ["half", "free"])
    assert out["NodeNames"] == ["half"]
    assert out["FailedNodes"] == {"free": "2/2 CardUuidMismatch"}
    whole = _pod({"nvidia.com/gpu": "1"}, {ann.USE_GPU_UUID: HALF.gpu_uuid(2)})
    assert _filter(whole, ["half"])["FailedNodes"] == {"half": "1/4 CardInsufficientMemory, 3/4 CardUuidMismatch"}
    typed = _pod({"nvidia.com/gpu": "1"}, {ann.USE_GPU_TYPE: "T4"})
    assert _filter(typed, ["free"])["FailedNodes"] == {"free": "2/2 CardTypeMismatch"}


def test_some_gpus_fit_but_not_enough() -> None:
    nodes, pods = _cluster()
    pods.append(hami_pod("free-0", "ns", "free", [(FREE.gpu_uuid(0), A100_MIB, 100)]))
    out = filter_result({"Pod": _pod({"nvidia.com/gpu": "2"}), "NodeNames": ["free"]}, nodes, pods)
    assert out["FailedNodes"] == {"free": "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"}


def test_the_pod_does_not_count_against_itself() -> None:
    nodes, pods = _cluster()
    me = hami_pod("p", "ns", "free", [(FREE.gpu_uuid(0), A100_MIB, 100), (FREE.gpu_uuid(1), A100_MIB, 100)])
    out = filter_result({"Pod": _pod({"nvidia.com/gpu": "2"}), "NodeNames": ["free"]}, nodes, [*pods, me])
    assert out["NodeNames"] == ["free"]


def test_pods_without_gpus_pass_every_node() -> None:
    out = _filter(_pod(None), ["half", "free", "cpu-only"])
    assert out == {"NodeNames": ["half", "free", "cpu-only"], "FailedNodes": {}, "Error": ""}


def test_an_error_lets_every_node_pass() -> None:
    class Broken:  # any API failure (here: no API at all)
        pass

    server = FilterStandIn(Broken(), port=0)
    try:
        body = json.dumps({"Pod": _pod({"nvidia.com/gpu": "2"}), "NodeNames": ["a", "b"]}).encode()
        assert server.handle_filter(body) == {"NodeNames": ["a", "b"], "FailedNodes": {}, "Error": ""}
        assert server.handle_filter(b"{not json") == {"NodeNames": [], "FailedNodes": {}, "Error": ""}
        assert server.errors == 2
    finally:
        server.stop()
