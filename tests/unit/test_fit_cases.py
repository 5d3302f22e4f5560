"""The differential Fit test's generator and judge, without a cluster (testbed/hami/fit_cases.py, fit_diff.py)."""

from __future__ import annotations

import re

from hami_place_core import annotations as ann
from hami_place_core.requests import PCT_UNSET, pod_request
from testbed.hami.fit_cases import FEATURES, generate, node_manifest, pod_manifest, preloaded_manifest
from testbed.hami.fit_diff import judge, model_state, rejudge, save_answers, summary
from testbed.hami.fit_probe import HamiAnswer
from testbed.hami.simulate import fit_on_node

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def test_the_same_seed_gives_the_same_cases_and_another_seed_others() -> None:
    assert generate(21, 50) == generate(21, 50)
    assert generate(21, 50) != generate(7, 50)
    assert generate(21, 60)[:50] == generate(21, 50)  # a case depends on (seed, number) only


def test_every_feature_of_the_issue_is_covered_by_each_seed() -> None:
    for seed in (21, 7, 1234):
        covered = {f for case in generate(seed, 320) for f in case.features}
        assert covered == set(FEATURES), set(FEATURES) - covered


def test_manifests_are_valid_kubernetes_objects() -> None:
    for case in generate(21, 80):
        names = [case.name, *case.node_names, *(p.name for p in case.preloaded)]
        assert all(DNS_LABEL.match(n) and len(n) <= 63 for n in names), names
        assert len(set(names)) == len(names)
        for n in case.nodes:
            assert (
                ann.decode_register(node_manifest(case, n)["metadata"]["annotations"][ann.NODE_REGISTER]).error is None
            )
        pod = pod_manifest(case)
        assert pod_request(pod, webhook=True).gpu_containers  # every case asks for a GPU
        assert all(int(v) >= 0 for c in case.containers if c for v in c.values())


def test_preloaded_pods_fit_where_they_were_put() -> None:
    for case in generate(7, 120):
        state = model_state(case)
        assert state.problems == {}
        for n in state.nodes.values():
            for g in n.devices:
                u = n.usage[g.uuid]
                assert u.used <= g.count and u.usedmem <= g.devmem and u.usedcores <= g.devcore
        assert {p.name for p in case.preloaded} == {k.split("/")[1] for k in state.pods}
        assert all(preloaded_manifest(case, p)["spec"]["nodeName"] == p.node for p in case.preloaded)


def _hami_as_the_model(case) -> HamiAnswer:
    """A HAMi answer that says exactly what the model says (spread GPUs, binpack nodes, no annotations)."""
    state = model_state(case)
    request = pod_request(pod_manifest(case), webhook=True)
    answer = HamiAnswer(admitted=pod_manifest(case))
    for name in case.node_names:
        devices = fit_on_node(request, state.nodes[name], "spread")
        if devices is None:
            answer.failed[name] = "NodeUnfitPod"
        else:
            answer.devices[name] = ann.encode_pod_devices(tuple(d for d in devices if d))
    return answer


def test_the_judge_counts_nothing_when_hami_says_what_the_model_says() -> None:
    cases = [c for c in generate(21, 120) if not c.annotations and all(c.containers)]
    verdicts = []
    for case in cases:
        answer = _hami_as_the_model(case)
        answer.admitted = {**answer.admitted, "spec": {"containers": _admitted(case)}}
        verdicts.append(judge(case, answer))
    report = summary(21, verdicts, 1.0)
    assert report["cases"] == len(cases) > 10 and report["disagreements"] == 0, report["examples"][:3]


def _admitted(case) -> list[dict]:
    # what HAMi's webhook leaves: the model's request written back as limits
    out = []
    for req in pod_request(pod_manifest(case), webhook=True).containers:
        limits = {"nvidia.com/gpu": str(req.nums), "nvidia.com/gpucores": str(req.coresreq)}
        if req.memreq:
            limits["nvidia.com/gpumem"] = str(req.memreq)
        if req.mem_percentage != PCT_UNSET:
            limits["nvidia.com/gpumem-percentage"] = str(req.mem_percentage)
        out.append({"name": "c", "resources": {"limits": limits}})
    return out


def test_the_judge_names_each_kind_of_disagreement() -> None:
    case = next(c for c in generate(21, 200) if not c.annotations and all(c.containers) and len(c.nodes) > 1)
    answer = _hami_as_the_model(case)
    answer.admitted = {**answer.admitted, "spec": {"containers": _admitted(case)}}
    fitting = [n for n in case.node_names if n not in answer.failed]
    if fitting:
        answer.failed[fitting[0]] = "CardInsufficientMemory"
    else:
        answer.failed.pop(case.node_names[0])
    answer.admitted["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = "7"
    kinds = {kind for kind, _ in judge(case, answer).disagreements}
    assert kinds == {"webhook", "node-fit"}
    assert judge(case, HamiAnswer(error="boom")).disagreements == [("probe", "boom")]


def test_saved_answers_are_judged_again_the_same_way(tmp_path) -> None:
    cases = generate(21, 30)
    answers = [_hami_as_the_model(c) for c in cases]
    direct = summary(21, [judge(c, a) for c, a in zip(cases, answers, strict=True)], 0.0)
    again = rejudge(save_answers(tmp_path, 21, answers))
    assert {**again, "seconds": 0.0} == direct


def test_an_empty_segment_for_a_gpu_less_container_is_an_encoding_disagreement() -> None:
    # HAMi writes segments only for containers that got GPUs (pkg/scheduler/score.go)
    candidates = [c for c in generate(21, 300) if not c.annotations and None in c.containers and len(c.nodes) == 1]
    placed = [(c, _fit_alone(c)) for c in candidates]
    case, devices = next((c, d) for c, d in placed if d is not None)
    answer = HamiAnswer(admitted=pod_manifest(case), node=case.node_names[0])
    answer.devices[answer.node] = ann.encode_pod_devices(devices)  # with the empty segments
    assert "encoding" in {kind for kind, _ in judge(case, answer).disagreements}
    answer.devices[answer.node] = ann.encode_pod_devices(tuple(d for d in devices if d))
    assert "encoding" not in {kind for kind, _ in judge(case, answer).disagreements}


def _fit_alone(case):
    request = pod_request(pod_manifest(case), webhook=True)
    return fit_on_node(request, model_state(case).nodes[case.node_names[0]], "spread")
