"""Gangs (issue 36 item 3): which group a pod belongs to, and how many members must fit at once."""

from __future__ import annotations

from typing import Any

import pytest

from hami_place_core import gangs as g


def _pod(name: str, ns: str = "ml", *, labels=None, annotations=None, spec=None, owner=None, node=None, phase=None):
    meta: dict[str, Any] = {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    out: dict[str, Any] = {"metadata": meta, "spec": {**(spec or {}), **({"nodeName": node} if node else {})}}
    if phase:
        out["status"] = {"phase": phase}
    return out


NATIVE_POD = _pod("w-0", spec={"schedulingGroup": {"podGroupName": "train"}}, labels={g.COSCHEDULING_LABEL: "x"})


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        # 1.36's own field wins over any label the pod also carries.
        (NATIVE_POD, g.GangRef(g.NATIVE, "ml", "train")),
        (
            _pod("a", spec={"workloadRef": {"name": "job", "podGroup": "workers"}}),
            g.GangRef(g.WORKLOAD, "ml", "job/workers"),
        ),
        (
            _pod("a", spec={"workloadRef": {"name": "job", "podGroup": "workers", "podGroupReplicaKey": "1"}}),
            g.GangRef(g.WORKLOAD, "ml", "job/workers/1"),
        ),
        (_pod("a", labels={g.COSCHEDULING_LABEL: "pg1"}), g.GangRef(g.COSCHEDULING, "ml", "pg1")),
        (_pod("a", annotations={g.VOLCANO_ANNOTATION: "vc"}), g.GangRef(g.VOLCANO, "ml", "vc")),
        (_pod("a", labels={g.KUEUE_GROUP_LABEL: "kq"}), g.GangRef(g.KUEUE, "ml", "kq")),
        (_pod("a", labels={g.JOBSET_LABEL: "js"}, owner=("Job", "js-w-0")), g.GangRef(g.JOBSET, "ml", "js")),
        (_pod("a", labels={g.LWS_LABEL: "lws", g.LWS_GROUP_LABEL: "2"}), g.GangRef(g.LWS, "ml", "lws/2")),
        (_pod("a", owner=("Job", "pi")), g.GangRef(g.JOB, "ml", "pi")),
        (_pod("a", owner=("ReplicaSet", "web-1")), None),
        (_pod("a", labels={g.COSCHEDULING_LABEL: ""}), None),  # HAMi: an empty value is no group
        (_pod("a", spec={"schedulingGroup": {}}), None),
    ],
)
def test_a_pod_names_its_group_in_one_of_the_known_ways(pod, expected) -> None:
    assert g.gang_of(pod) == expected


def test_the_native_gang_size_is_its_pod_groups_min_count() -> None:
    members = [_pod(f"w-{i}", spec={"schedulingGroup": {"podGroupName": "train"}}) for i in range(5)]
    obj = {"spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    found = g.find_gang("podgroup/train", "ml", members, {g.GangRef(g.NATIVE, "ml", "train"): obj})
    assert (found.min_count, len(found.members), found.size_from) == (4, 5, "its gang policy's minCount")
    basic = g.gang(found.ref, members, {"spec": {"schedulingPolicy": {"basic": {}}}})
    assert basic.min_count == 1


def test_a_135_workload_reads_min_count_from_its_named_pod_group() -> None:
    ref = g.GangRef(g.WORKLOAD, "ml", "job/workers")
    obj = {
        "spec": {
            "podGroups": [
                {"name": "driver", "policy": {"basic": {}}},
                {"name": "workers", "policy": {"gang": {"minCount": 3}}},
            ]
        }
    }
    assert g.gang(ref, [_pod("a")], obj).min_count == 3


@pytest.mark.parametrize(
    ("ref", "obj", "size"),
    [
        (g.GangRef(g.COSCHEDULING, "ml", "pg"), {"spec": {"minMember": 8}}, 8),
        (g.GangRef(g.VOLCANO, "ml", "pg"), {"spec": {"minMember": "2"}}, 2),
        (g.GangRef(g.JOB, "ml", "pi"), {"spec": {"parallelism": 4, "completionMode": "Indexed"}}, 4),
        (g.GangRef(g.LWS, "ml", "lws/0"), {"spec": {"leaderWorkerTemplate": {"size": 3}}}, 3),
        (
            g.GangRef(g.JOBSET, "ml", "js"),
            {"spec": {"replicatedJobs": [{"replicas": 2, "template": {"spec": {"parallelism": 2}}}, {"replicas": 1}]}},
            5,
        ),
        (g.GangRef(g.COSCHEDULING, "ml", "pg"), None, 2),  # no object read: the members seen
    ],
)
def test_each_kind_states_its_size_in_its_own_field(ref, obj, size) -> None:
    assert g.gang(ref, [_pod("a"), _pod("b")], obj).min_count == size


def test_kueue_pod_groups_carry_their_size_on_the_pods() -> None:
    pods = [
        _pod(f"p{i}", labels={g.KUEUE_GROUP_LABEL: "kq"}, annotations={g.KUEUE_TOTAL_ANNOTATION: "3"}) for i in range(2)
    ]
    found = g.find_gang("pg/kq", "ml", pods)
    assert (found.ref.kind, found.min_count) == (g.KUEUE, 3)


def test_waiting_members_are_the_unbound_ones_that_have_not_ended() -> None:
    pods = [
        _pod("a", labels={g.COSCHEDULING_LABEL: "pg"}, node="n1"),
        _pod("b", labels={g.COSCHEDULING_LABEL: "pg"}),
        _pod("c", labels={g.COSCHEDULING_LABEL: "pg"}, phase="Failed"),
        _pod("d", labels={g.COSCHEDULING_LABEL: "pg"}),
    ]
    found = g.find_gang("podgroup/pg", "ml", pods)
    assert [p["metadata"]["name"] for p in found.waiting] == ["b", "d"]
    assert found.running == 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train", "is not a group: use KIND/NAME"),
        ("deploy/train", "is not a group"),
        ("podgroup/", "is not a group"),
        ("podgroup/  ", "is not a group"),
        ("podgroup/other", "no pod in namespace ml belongs to podgroup/other"),
        ("job/train", "no pod in namespace ml belongs to job/train"),
    ],
)
def test_a_group_that_cannot_be_found_says_why(text: str, message: str) -> None:
    with pytest.raises(g.GangError, match=message):
        g.find_gang(text, "ml", [NATIVE_POD])


def test_a_name_several_kinds_share_is_refused_with_each_of_them() -> None:
    pods = [NATIVE_POD, _pod("v", annotations={g.VOLCANO_ANNOTATION: "train"})]
    with pytest.raises(g.GangError, match="names several groups: PodGroup ml/train, Volcano PodGroup ml/train"):
        g.find_gang("podgroup/train", "ml", pods)


def test_an_lws_is_named_by_its_own_name_when_one_group_has_pods() -> None:
    pods = [_pod(f"l{i}", labels={g.LWS_LABEL: "lws", g.LWS_GROUP_LABEL: "0"}) for i in range(2)]
    assert g.find_gang("lws/lws", "ml", pods).ref.name == "lws/0"
    pods.append(_pod("l9", labels={g.LWS_LABEL: "lws", g.LWS_GROUP_LABEL: "1"}))
    with pytest.raises(g.GangError, match="several groups"):
        g.find_gang("lws/lws", "ml", pods)
    assert len(g.find_gang("lws/lws/1", "ml", pods).members) == 1


@pytest.mark.parametrize("bad", [None, "four", True, 2.5, {"x": 1}])
def test_a_size_that_is_not_a_whole_number_is_an_error_not_a_crash(bad) -> None:
    with pytest.raises(g.GangError, match="not a whole number"):
        g.gang(g.GangRef(g.COSCHEDULING, "ml", "pg"), [_pod("a")], {"spec": {"minMember": bad}})


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(g.GangError, match="asks for 0 members"):
        g.gang(g.GangRef(g.COSCHEDULING, "ml", "pg"), [_pod("a")], {"spec": {"minMember": 0}})


def test_object_paths_name_each_kinds_api() -> None:
    assert g.object_path(g.GangRef(g.NATIVE, "ml", "t")) == "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/t"
    assert g.object_path(g.GangRef(g.WORKLOAD, "ml", "job/workers/1")).endswith("/namespaces/ml/workloads/job")
    assert g.object_path(g.GangRef(g.LWS, "ml", "lws/0")).endswith("/leaderworkersets/lws")
    assert g.object_path(g.GangRef(g.KUEUE, "ml", "kq")) == ""
