"""HAMi annotation codecs: every format v2.4-v2.10, garbage-proof, round-tripping."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hami_place_core import annotations as ann
from hami_place_core.annotations import ContainerDevice, GpuDevice

# A real v2.x register value (issue #2036 shape), plus an unknown key and v2.8's devicepairscore.
REAL_JSON = (
    '[{"id":"GPU-4b3f0a2c-1111-2222-3333-444455556666","index":4,"count":10,"devmem":23028,"devcore":100,'
    '"type":"NVIDIA GeForce RTX 4090","numa":1,"mode":"hami-core","health":true,"devicepairscore":{},"future":1},'
    '{"id":"GPU-aaaa","count":10,"devmem":23028,"devcore":100,"type":"NVIDIA GeForce RTX 4090","health":true}]'
)


def test_json_format_v28_plus() -> None:
    d = ann.decode_register(REAL_JSON)
    assert d.format == "json" and d.error is None and d.has_index
    first, second = d.devices
    assert first == GpuDevice(
        "GPU-4b3f0a2c-1111-2222-3333-444455556666", 4, 10, 23028, 100, "NVIDIA GeForce RTX 4090", 1, "hami-core", True
    )
    # omitempty: a missing index is 0, a missing mode is hami-core
    assert (second.index, second.numa, second.mode) == (0, 0, "hami-core")


def test_missing_health_means_unhealthy() -> None:
    d = ann.decode_register('[{"id":"GPU-x","index":0,"count":10,"devmem":100,"devcore":100,"type":"T4"}]')
    assert d.devices[0].health is False


def test_legacy_nine_field_format_v25_v27() -> None:
    value = (
        "GPU-a,10,32768,100,NVIDIA-Tesla V100-SXM2-32GB,0,true,1,hami-core:"
        "GPU-b,10,32768,100,NVIDIA-Tesla V100-SXM2-32GB,1,false,0,mig:"
    )
    d = ann.decode_register(value)
    assert d.format == "legacy-9" and d.error is None and d.has_index
    assert [(g.uuid, g.index, g.health, g.mode) for g in d.devices] == [
        ("GPU-a", 1, True, "hami-core"),
        ("GPU-b", 0, False, "mig"),
    ]


def test_legacy_seven_field_format_has_no_index() -> None:
    d = ann.decode_register("GPU-a,10,15360,100,NVIDIA-Tesla T4,0,true:GPU-b,10,15360,100,NVIDIA-Tesla T4,0,true:")
    assert d.format == "legacy-7" and not d.has_index
    assert [g.index for g in d.devices] == [0, 0]  # HAMi defaults index to 0
    assert d.error is None


@pytest.mark.parametrize(
    ("value", "fmt", "error"),
    [
        (None, "absent", "node has no hami.io/node-nvidia-register annotation"),
        ("", "absent", "node has no hami.io/node-nvidia-register annotation"),
        ("[{", "invalid", "register annotation is not valid JSON"),
        ('{"id":"x"}', "invalid", "malformed segment '{\"id\"'"),
        ('["x"]', "invalid", "1 unreadable entry, so none of the node's GPUs count: entry 0 is not an object"),
        ('[{"index":0}]', "invalid", "entry 0 has no id"),
        ('[{"id":"G","index":"0"}]', "invalid", 'entry 0 (G): index must be an integer, got "0"'),
        ('[{"id":"G","health":"yes"}]', "invalid", "entry 0 (G): health must be a boolean"),
        ("GPU-a,10,x,100,T4,0,true,0,hami-core:", "invalid", "entry 0 (GPU-a): strconv.ParseInt: parsing 'x': invalid"),
        ("GPU-a,10,1,100,T4,0,maybe:", "invalid", "health 'maybe' is not a boolean"),
        ("a,b,c:", "legacy-9", "entry 0 has 3 fields, expected 9 (v2.5-v2.7) or 7 (≤v2.4); HAMi skips it"),
        ("nonsense", "invalid", "neither JSON nor a ':'-ended list"),
        ("GPU-a:", "invalid", "malformed segment 'GPU-a'"),
    ],
)
def test_garbage_is_reported_not_raised(value, fmt, error) -> None:
    d = ann.decode_register(value)
    assert d.format == fmt
    assert d.error is not None and error in d.error


def test_duplicate_index_is_flagged() -> None:
    entries = [
        {"id": f"GPU-{i}", "index": 0, "count": 10, "devmem": 1, "devcore": 100, "health": True} for i in range(2)
    ]
    d = ann.decode_register(json.dumps(entries))
    assert d.error == "duplicate GPU index [0]: gpu-N cannot be resolved on this node"
    assert len(d.devices) == 2


def test_one_bad_entry_makes_the_node_unusable_as_in_hami() -> None:
    d = ann.decode_register('[{"id":"GPU-ok","index":1,"health":true}, 7]')
    assert d.devices == () and d.format == "invalid"
    assert d.skipped == ("entry 1 is not an object",)


def test_pod_devices_decode_v210_example() -> None:
    # issue #1106 shape, two containers, the second without GPUs
    d = ann.decode_pod_devices("GPU-2409b7b6-aaaa,NVIDIA,4096,0:GPU-bbbb,NVIDIA,2048,30:;;")
    assert d.error is None
    assert d.containers == (
        (ContainerDevice("GPU-2409b7b6-aaaa", "NVIDIA", 4096, 0), ContainerDevice("GPU-bbbb", "NVIDIA", 2048, 30)),
        (),
    )


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("GPU-a,NVIDIA:;", "container 0: device entry 'GPU-a,NVIDIA': 2 fields, expected 4"),
        ("GPU-a,NVIDIA,lots,0:;", "memory or cores: strconv.ParseInt: parsing 'lots': invalid syntax"),
    ],
)
def test_pod_devices_garbage(value, error) -> None:
    d = ann.decode_pod_devices(value)
    assert d.error is not None and error in d.error


def test_selection_lists_trim_and_drop_empties() -> None:
    assert ann.split_list(" GPU-a, ,GPU-b ,") == ("GPU-a", "GPU-b")
    assert ann.split_list("") == ()
    assert ann.split_list(None) == ()


def test_use_list_keeps_a_separators_only_value_as_a_constraint() -> None:
    # HAMi pkg/device/devices.go CheckUUID/CheckType: only a blank value is "no constraint"
    assert ann.use_list(" GPU-a, ,GPU-b ,") == ("GPU-a", "GPU-b")
    assert ann.use_list(",") == ann.use_list(" , ") == ("",)
    assert ann.use_list(" ") == ann.use_list("") == ann.use_list(None) == ()


# ---- property tests -----------------------------------------------------------------------------
uuids = st.from_regex(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", fullmatch=True)
gpu_types = st.sampled_from(["NVIDIA A100-SXM4-80GB", "NVIDIA-Tesla T4", "NVIDIA-Tesla V100-SXM2-32GB"])
devices = st.builds(
    GpuDevice,
    uuid=uuids,
    index=st.integers(0, 15),
    count=st.integers(1, 64),
    devmem=st.integers(1, 200_000),
    devcore=st.integers(1, 400),
    type=gpu_types,
    numa=st.integers(0, 3),
    mode=st.sampled_from(["hami-core", "mig", "mps"]),
    health=st.booleans(),
)
device_lists = st.lists(devices, max_size=8, unique_by=(lambda d: d.uuid, lambda d: d.index))


@given(device_lists)
def test_json_round_trip(devs) -> None:
    d = ann.decode_register(ann.encode_register_json(devs))
    assert d.devices == tuple(devs)


@given(device_lists.filter(len))
def test_legacy9_round_trip(devs) -> None:
    d = ann.decode_register(ann.encode_register_legacy(devs, 9))
    assert d.devices == tuple(devs) and d.format == "legacy-9"


@given(device_lists.filter(len))
def test_legacy7_round_trip_loses_only_index_and_mode(devs) -> None:
    d = ann.decode_register(ann.encode_register_legacy(devs, 7))
    assert [(g.uuid, g.count, g.devmem, g.health) for g in d.devices] == [
        (g.uuid, g.count, g.devmem, g.health) for g in devs
    ]
    assert all(g.index == 0 and g.mode == "hami-core" for g in d.devices)


container_devices = st.lists(
    st.lists(
        st.builds(
            ContainerDevice,
            uuid=uuids,
            type=st.just("NVIDIA"),
            usedmem=st.integers(0, 10**6),
            usedcores=st.integers(0, 100),
        ),
        max_size=4,
    ),
    max_size=5,
)


@given(container_devices)
def test_pod_devices_round_trip(containers) -> None:
    d = ann.decode_pod_devices(ann.encode_pod_devices(containers))
    assert d.error is None
    assert [list(c) for c in d.containers] == containers


junk = st.one_of(
    st.text(max_size=300),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
        lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=8), children, max_size=5),
        max_leaves=30,
    ).map(json.dumps),
)


@settings(max_examples=400)
@given(junk)
def test_register_decoder_survives_anything(value) -> None:
    d = ann.decode_register(value)
    assert d.format in ("json", "legacy-9", "legacy-7", "absent", "invalid")
    assert all(isinstance(g, GpuDevice) for g in d.devices)


@settings(max_examples=400)
@given(junk)
def test_pod_devices_decoder_survives_anything(value) -> None:
    d = ann.decode_pod_devices(value)
    assert all(isinstance(c, ContainerDevice) for devs in d.containers for c in devs)
