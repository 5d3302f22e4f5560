"""HAMi's request resolution and per-GPU Fit rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_place_core import fit
from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import GpuUsage, fit_pod, gpu_fit_reason
from hami_place_core.requests import (
    PCT_UNSET,
    DeviceSelectors,
    GpuRequest,
    HamiConfig,
    container_request,
    has_hami_resources,
    pod_request,
)

A100 = GpuDevice("GPU-a", 0, 10, 81920, 100, "NVIDIA A100-SXM4-80GB", 0, "hami-core", True)


def res(**limits: str) -> dict:
    return {"limits": {k.replace("_", "-").replace("nvidia-com-", "nvidia.com/"): v for k, v in limits.items()}}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"limits": {"nvidia.com/gpu": "1"}}, GpuRequest(1, 0, 100, 0)),
        ({"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096"}}, GpuRequest(2, 4096, PCT_UNSET, 0)),
        (
            {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "30", "nvidia.com/gpucores": "30"}},
            GpuRequest(1, 0, 30, 30),
        ),
        # gpumem wins over the percentage at Fit time, both are kept
        (
            {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpumem-percentage": "50"}},
            GpuRequest(1, 1000, 50, 0),
        ),
        # percentage is clamped to 100; <=0 means unset
        ({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}}, GpuRequest(1, 0, 100, 0)),
        ({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}}, GpuRequest(1, 0, 100, 0)),
        # requests are the fallback for limits
        ({"requests": {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "20"}}, GpuRequest(1, 0, 100, 20)),
        # fractional quantities are not integers (Quantity.AsInt64 fails): absent
        ({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1.5"}}, GpuRequest(1, 0, 100, 0)),
        ({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1Ki"}}, GpuRequest(1, 1024, PCT_UNSET, 0)),
        ({"limits": {"cpu": "1"}}, None),
        ({"limits": {"nvidia.com/gpu": "0"}}, None),
        (None, None),
    ],
)
def test_container_request(resources, expected) -> None:
    assert container_request(resources) == expected


def test_defaults_from_the_scheduler_config() -> None:
    cfg = HamiConfig(default_memory=2048, default_cores=10, memory_factor=2)
    assert container_request({"limits": {"nvidia.com/gpu": "1"}}, cfg) == GpuRequest(1, 2048, PCT_UNSET, 10)
    assert container_request({"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}}, cfg).memreq == 200


def test_webhook_mutations_for_templates() -> None:
    # memory alone implies defaultGPUNum GPUs; exclusive memory gets all the cores (v2.7+)
    assert container_request({"limits": {"nvidia.com/gpumem": "1000"}}, webhook=True) == GpuRequest(
        1, 1000, PCT_UNSET, 0
    )
    assert container_request({"limits": {"nvidia.com/gpu": "1"}}, webhook=True) == GpuRequest(1, 0, 100, 100)
    assert container_request({"limits": {"nvidia.com/gpumem": "1000"}}) is None


@pytest.mark.parametrize(
    ("limits", "requests", "cores"),
    [
        ({"nvidia.com/gpu": "1"}, {}, 100),  # no memory named: exclusive
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}, {}, 100),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "99.5"}, {}, 100),  # Quantity.Value() rounds up
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}, {}, 0),  # named, not 100: whole memory, no cores
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}, {}, 0),  # exactly 100 only
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "0"}, {}, 0),  # memory named (even 0): not exclusive
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1.5"}, {}, 0),  # a fractional memory is still named
        ({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0.5"}, {}, 0),  # cores named: left alone
        ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpumem": "10"}, 0),  # requests count as named
        ({"nvidia.com/gpumem-percentage": "100"}, {}, 100),  # count added by the webhook first
    ],
)
def test_webhook_exclusive_cores_follow_hamis_presence_rules(limits, requests, cores) -> None:
    # HAMi pkg/device/nvidia/device.go defaultExclusiveCoreIfNeeded / resourcePresent / resourceValue
    req = container_request({"limits": limits, "requests": requests}, webhook=True)
    assert req is not None and req.coresreq == cores


def test_webhook_adds_the_gpu_count_only_from_limits() -> None:
    # mutateContainerResource looks at limits alone; a count-less request in `requests` is no GPU
    assert container_request({"requests": {"nvidia.com/gpumem-percentage": "50"}}, webhook=True) is None
    no_default = HamiConfig(default_gpu_num=0)
    assert container_request({"limits": {"nvidia.com/gpucores": "20"}}, no_default, webhook=True) is None


@pytest.mark.parametrize("value", [",", " , ", ",,"])
def test_a_use_list_of_separators_only_allows_no_gpu(value) -> None:
    # HAMi pkg/device/devices.go CheckUUID/CheckType: a non-blank value is a constraint, and its
    # blank items match no device id or type.
    for key, reason in (
        ("nvidia.com/use-gpuuuid", fit.CARD_UUID_MISMATCH),
        ("nvidia.com/use-gputype", fit.CARD_TYPE_MISMATCH),
    ):
        sel = DeviceSelectors.from_annotations({key: value})
        assert gpu_fit_reason(GpuRequest(1, 0, 10, 10), A100, GpuUsage(), sel) == reason
    # ... while blank values, and nouse- lists of separators, constrain nothing
    for a in (
        {"nvidia.com/use-gpuuuid": " "},
        {"nvidia.com/nouse-gpuuuid": value},
        {"nvidia.com/nouse-gputype": value},
    ):
        assert gpu_fit_reason(GpuRequest(1, 0, 10, 10), A100, GpuUsage(), DeviceSelectors.from_annotations(a)) is None


def test_pod_request_reads_selectors_and_init_containers() -> None:
    pod = {
        "metadata": {"annotations": {"nvidia.com/use-gpuuuid": "GPU-a, GPU-b", "nvidia.com/nouse-gputype": "t4"}},
        "spec": {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [{"name": "c"}, {"name": "d", "resources": {"limits": {"nvidia.com/gpu": "2"}}}],
        },
    }
    r = pod_request(pod)
    assert r.selectors.use_uuids == ("GPU-a", "GPU-b") and r.selectors.nouse_types == ("t4",)
    assert r.containers[0] is None and r.containers[1].nums == 2 and r.init[0].nums == 1
    assert r.gpu_containers == (r.containers[1],) and r.max_gpus == 2
    assert has_hami_resources(pod) and not has_hami_resources({"spec": {"containers": [{"name": "x"}]}})


@pytest.mark.parametrize(
    ("request_", "gpu", "usage", "selectors", "reason"),
    [
        (GpuRequest(1, 0, 30, 30), A100, GpuUsage(), DeviceSelectors(), None),
        (
            GpuRequest(1, 0, 30, 30),
            GpuDevice("GPU-a", 0, 10, 81920, 100, "x", health=False),
            GpuUsage(),
            DeviceSelectors(),
            fit.CARD_NOT_HEALTH,
        ),
        (GpuRequest(1, 0, 30, 30), A100, GpuUsage(), DeviceSelectors(use_types=("T4",)), fit.CARD_TYPE_MISMATCH),
        (GpuRequest(1, 0, 30, 30), A100, GpuUsage(), DeviceSelectors(use_types=("a100",)), None),  # substring, any case
        (GpuRequest(1, 0, 30, 30), A100, GpuUsage(), DeviceSelectors(nouse_types=("A100",)), fit.CARD_TYPE_MISMATCH),
        (GpuRequest(1, 0, 30, 30), A100, GpuUsage(), DeviceSelectors(use_uuids=("GPU-b",)), fit.CARD_UUID_MISMATCH),
        (GpuRequest(1, 0, 30, 30), A100, GpuUsage(), DeviceSelectors(nouse_uuids=("GPU-a",)), fit.CARD_UUID_MISMATCH),
        (GpuRequest(1, 0, 30, 0), A100, GpuUsage(used=10), DeviceSelectors(), fit.CARD_TIME_SLICING_EXHAUSTED),
        (GpuRequest(1, 0, 30, 0), A100, GpuUsage(1, 81920 - 24575, 0), DeviceSelectors(), fit.CARD_INSUFFICIENT_MEMORY),
        (GpuRequest(1, 0, 30, 0), A100, GpuUsage(1, 81920 - 24576, 0), DeviceSelectors(), None),  # 30% of 81920 = 24576
        (GpuRequest(1, 0, 10, 30), A100, GpuUsage(1, 0, 71), DeviceSelectors(), fit.CARD_INSUFFICIENT_CORE),
        (GpuRequest(1, 0, 10, 100), A100, GpuUsage(1, 0, 0), DeviceSelectors(), fit.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT),
        (GpuRequest(1, 0, 10, 0), A100, GpuUsage(1, 0, 100), DeviceSelectors(), fit.CARD_COMPUTE_UNITS_EXHAUSTED),
    ],
)
def test_gpu_fit_reason(request_, gpu, usage, selectors, reason) -> None:
    assert gpu_fit_reason(request_, gpu, usage, selectors) == reason


def test_cordoned_gpu_does_not_fit() -> None:
    assert gpu_fit_reason(GpuRequest(1, 0, 10, 0), A100, cordoned={"GPU-a"}) == fit.CARD_CORDONED


def _gpus(n: int) -> list[GpuDevice]:
    return [GpuDevice(f"GPU-{i}", i, 10, 1000, 100, "T", health=True) for i in range(n)]


def test_fit_pod_exact_needs_every_target() -> None:
    gpus = _gpus(2)
    pod = pod_request(
        {
            "spec": {
                "containers": [{"resources": {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem-percentage": "50"}}}]
            }
        }
    )
    usage = {"GPU-0": GpuUsage(1, 600, 0)}
    result = fit_pod(pod, gpus, usage, exact=True)
    assert not result.ok
    assert result.reasons == (("GPU-0", fit.CARD_INSUFFICIENT_MEMORY),)
    assert "GPU-0: not enough free GPU memory (CardInsufficientMemory)" in result.message()
    assert usage["GPU-0"] == GpuUsage(1, 600, 0)  # not modified
    assert fit_pod(pod, gpus, {}, exact=True).assignment == (("GPU-0", "GPU-1"),)


def test_fit_pod_accumulates_between_containers() -> None:
    pod = pod_request(
        {
            "spec": {
                "containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "60"}}},
                    {"resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "60"}}},
                ]
            }
        }
    )
    assert not fit_pod(pod, _gpus(1), {}).ok  # 60% + 60% do not share one GPU
    assert fit_pod(pod, _gpus(2), {}).ok


@given(
    st.integers(1, 100),
    st.integers(0, 100),
    st.integers(0, 9),
    st.integers(0, 1000),
    st.integers(0, 100),
)
def test_fit_never_oversubscribes(pct, cores, used, usedmem, usedcores) -> None:
    gpu = GpuDevice("GPU-p", 0, 10, 1000, 100, "T", health=True)
    req = GpuRequest(1, 0, pct, cores)
    u = GpuUsage(used, usedmem, usedcores)
    if gpu_fit_reason(req, gpu, u) is None:
        fit.add_usage(u, req, gpu)
        assert u.used <= gpu.count and u.usedmem <= gpu.devmem and u.usedcores <= gpu.devcore
