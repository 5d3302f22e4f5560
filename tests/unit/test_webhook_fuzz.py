"""Seeded fuzz of the webhooks' logic: thousands of AdmissionReviews built as the API server sends
them (JSON bytes through parse_review), over well-formed and malformed placements and varied pods.

The validating webhook must deny every malformed placement (422, a message naming the field) and
never answer 500 or log a traceback; the mutating webhook must never fall into its internal-error
path. A fuzz run once found 71 reviews answered 500 (``'str' object has no attribute 'get'``)."""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import random
from typing import Any

import pytest

from agent import metrics
from agent.admission import parse_review
from agent.cache import ClusterCache
from agent.config import Settings
from agent.events import EventRecorder
from agent.mutate import PodMutator
from agent.validate import PlacementValidator
from hami_place_core import placement as hp
from hami_place_core.annotations import GpuDevice
from hami_place_core.kube import errors as kube_errors
from hami_place_core.placement import Placement, pod_shape_problems
from testbed.hami.simulate import gpu_uuid, node_manifest

SEED = 20  # issue 20
PLACEMENT_CASES = 3000
POD_CASES = 2000
NS = "fuzz"
APPS = ("web", "train", "infer")


class FakeKube:
    """The API calls the webhooks make: SubjectAccessReviews, status PUTs (one in seven lost to a
    409, to exercise the re-read), GETs of placements and Events."""

    def __init__(self, rng: random.Random, cache: ClusterCache) -> None:
        self.rng, self.cache, self.rv = rng, cache, 100

    async def request(self, method: str, path: str, query: Any = None, body: Any = None) -> dict[str, Any]:
        if path.endswith("/subjectaccessreviews"):
            return {"status": {"allowed": self.rng.random() < 0.8, "reason": "fuzz"}}
        if path.endswith("/events"):
            return {}
        name = path.split("/")[-2 if path.endswith("/status") else -1]
        current = self.cache._informers["placements"].get(f"{NS}/{name}")
        if current is None:
            raise kube_errors.NotFound("gone", status=404)
        if method == "GET":
            return current
        if self.rng.random() < 1 / 7:
            self.rv += 1  # someone else wrote first
            self.cache.apply(
                "placements",
                {
                    "type": "MODIFIED",
                    "object": {**current, "metadata": {**current["metadata"], "resourceVersion": str(self.rv)}},
                },
            )
            raise kube_errors.Conflict("the object has been modified", status=409)
        self.rv += 1
        return {
            **current,
            "metadata": {**current["metadata"], "resourceVersion": str(self.rv)},
            "status": body["status"],
        }


def _junk(rng: random.Random) -> Any:
    return rng.choice(["x", "", 7, -1, 3.5, True, None, [], ["a", 1], {}, {"k": "v"}, {"matchLabels": 1}, "gpu-0"])


def _selector(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.55:
        return {"matchLabels": {"app": rng.choice(APPS)}}
    if roll < 0.7:
        ops = ["In", "NotIn", "Exists", "DoesNotExist"]
        op = rng.choice(ops)
        expr: dict[str, Any] = {"key": "app", "operator": op}
        if op in ("In", "NotIn"):
            expr["values"] = rng.sample(APPS, rng.randint(1, 2))
        return {"matchExpressions": [expr]}
    return rng.choice(
        [
            "app=web",  # a string
            ["app", "web"],
            {"matchLabels": ["app", "web"]},  # a list
            {"matchLabels": "app=web"},
            {"matchLabels": {"app": 1}},
            {"matchExpressions": "app in (web)"},
            {"matchExpressions": [{"key": "app", "operator": "Bogus", "values": ["web"]}]},
            {"matchExpressions": [{"key": "app", "operator": "In"}]},
            {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["web"]}]},
            {"matchExpressions": [{"key": 3, "operator": "In", "values": ["web"]}]},
            {"matchExpressions": [{"key": "app", "operator": "In", "values": "web"}]},
            {"matchExpressions": [{"key": "app", "operator": "In", "values": [1]}]},
            {"matchExpressions": ["app"]},
            {"matchLabels": {"app": "web"}, "matchExpressions": [None]},
            {},
            _junk(rng),
        ]
    )


def _spec(rng: random.Random) -> Any:
    if rng.random() < 0.05:
        return _junk(rng)  # spec not an object
    spec: dict[str, Any] = {
        "reqID": f"req-{rng.randrange(40):05d}",
        "podSelector": _selector(rng),
        "nodeName": rng.choice(["n1", "n1", "n2", "missing"]),
        "gpuDevices": rng.choice([["gpu-0"], ["gpu-1/50", "gpu-0/50"], ["gpu-0", "gpu-1"], ["gpu-7"]]),
    }
    if rng.random() < 0.3:
        spec["evictPod"] = rng.choice(["web-0", "web-1", "solo", "nope"])
    if rng.random() < 0.1:
        spec["timeouts"] = rng.choice([{"evictionSeconds": 30}, {"evictionSeconds": "5m"}, "fast", {}])
    for key in ("reqID", "nodeName", "gpuDevices", "evictPod"):
        if rng.random() < 0.06:
            spec[key] = rng.choice(
                [12345, None, ["req"], {"a": 1}, "gpu-0", ["gpu-0", 1], ["gpu-0", "gpu-0"], ["gpu-x"], [], 0]
            )
    if rng.random() < 0.05:
        del spec[rng.choice(list(spec))]
    return spec


def _placement_object(rng: random.Random, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": hp.API_VERSION,
        "kind": hp.KIND,
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "generation": 1},
        "spec": _spec(rng),
    }
    if rng.random() < 0.3:
        obj["status"] = rng.choice(
            [
                {"phase": rng.choice(["Pending", "Claimed", "Bound", "Completed", "WaitingForPod", "Evicting"])},
                {"phase": 3},
                "broken",
                {"phase": "Claimed", "targetUUIDs": "GPU-x", "claim": 1},
            ]
        )
    return obj


def _review(operation: str, kind: str, obj: dict[str, Any], old: Any, rng: random.Random) -> bytes:
    group, version, resource = ("", "v1", "pods") if kind == "Pod" else (hp.GROUP, hp.VERSION, hp.PLURAL)
    request = {
        "uid": f"u-{rng.randrange(10**9)}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "namespace": NS,
        "name": (obj.get("metadata") or {}).get("name", "") if isinstance(obj.get("metadata"), dict) else "",
        "operation": operation,
        "userInfo": rng.choice(
            [
                {"username": "alice", "groups": ["system:authenticated"], "uid": "1"},
                {"username": "system:serviceaccount:kube-system:replicaset-controller"},
                {"username": 7, "groups": "admins", "extra": {"a": "b"}},  # crafted
            ]
        ),
        "object": obj,
        "oldObject": old,
        "dryRun": rng.random() < 0.1,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": f"{operation.title()}Options"},
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def _pod(rng: random.Random, i: int) -> dict[str, Any]:
    app = rng.choice(APPS)
    limits = rng.choice([{"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "4096"}, {}])
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": f"{app}-", "namespace": NS, "labels": {"app": app}},
        "spec": {
            "schedulerName": rng.choice(["hami-scheduler", "default-scheduler"]),
            "containers": [{"name": "c", "image": "pause", "resources": {"limits": limits}}],
        },
    }
    if rng.random() < 0.5:
        pod["metadata"]["ownerReferences"] = [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-rs", "uid": "rs", "controller": True}
        ]
    if rng.random() < 0.1:
        pod["metadata"]["annotations"] = {hp.POD_CLAIM: "tok", hp.POD_PLACEMENT: f"p{rng.randrange(30)}"}
    if rng.random() < 0.1:
        pod["metadata"]["labels"] = {"app": app, "extra": "", "n": str(i)}
    if rng.random() < 0.15:  # what only a crafted review carries
        where, value = rng.choice(
            [
                (("metadata", "labels"), ["app", app]),
                (("metadata", "annotations"), {hp.POD_CLAIM: 7}),
                (("metadata", "annotations"), "claimed"),
                (("metadata", "ownerReferences"), ["rs"]),
                (("spec",), "pod"),
                (("spec", "containers"), "c"),
                (("spec", "containers"), [7]),
                (("spec", "containers"), [{"name": "c", "resources": ["nvidia.com/gpu"]}]),
                (("spec", "containers"), [{"name": "c", "resources": {"limits": "nvidia.com/gpu=1"}}]),
                (("spec", "containers"), [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]),
                (("spec", "initContainers"), {"name": "i"}),
                (("spec", "affinity"), {"nodeAffinity": []}),
                (("spec", "affinity"), {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": 1}}),
                (("spec", "affinity"), "near n1"),
            ]
        )
        target = pod
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value
    return pod


def _cache(rng: random.Random) -> ClusterCache:
    cache = ClusterCache(None)  # type: ignore[arg-type]  # events are applied by hand
    for inf in cache._informers.values():  # ready as after the first lists
        inf._synced.set()
    for node in ("n1", "n2"):
        devices = [
            GpuDevice(uuid=gpu_uuid(node, i), index=i, count=10, devmem=81920, devcore=100, type="A100", health=i != 3)
            for i in range(4)
        ]
        cache.apply("nodes", {"type": "ADDED", "object": node_manifest(node, devices)})
    for name, owner in (("web-0", "ReplicaSet"), ("web-1", "DaemonSet"), ("solo", None)):
        meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": {"app": "web"}}
        if owner:
            meta["ownerReferences"] = [{"kind": owner, "name": "web-rs", "controller": True}]
        pod = {"metadata": meta, "spec": {"nodeName": "n2", "containers": [{"name": "c", "resources": {}}]}}
        cache.apply("pods", {"type": "ADDED", "object": {**pod, "status": {"phase": "Running"}}})
    for i in range(30):  # placements of every shape, as a watch could deliver them
        cache.apply(
            "placements",
            {
                "type": "ADDED",
                "object": {
                    **_placement_object(rng, f"p{i}"),
                    "metadata": {
                        "name": f"p{i}",
                        "namespace": NS,
                        "resourceVersion": "1",
                        "creationTimestamp": f"2026-01-01T00:00:{i:02d}Z",
                    },
                },
            },
        )
    return cache


def _errors(kind: str) -> float:
    return metrics.REGISTRY.get_sample_value("hami_place_errors_total", {"kind": kind}) or 0.0


def test_validating_webhook_denies_every_malformed_placement_and_never_fails(caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(SEED)  # noqa: S311 - a reproducible fuzz, not a secret

    async def run() -> dict[str, int]:
        cache = _cache(rng)
        validator = PlacementValidator(Settings(), cache, FakeKube(rng, cache))  # type: ignore[arg-type]
        seen = {"allowed": 0, "denied": 0, "malformed": 0}
        for i in range(PLACEMENT_CASES):
            obj = _placement_object(rng, f"new{i}")
            old = None
            operation = "CREATE"
            if rng.random() < 0.2:
                operation = "UPDATE"
                old = _placement_object(rng, f"new{i}") if rng.random() < 0.8 else copy.deepcopy(obj)
            verdict = await validator.review(parse_review(_review(operation, hp.KIND, obj, old, rng)))
            assert verdict.code != 500, (obj, verdict.message)
            malformed = Placement.from_object(obj).problems
            if malformed and not (operation == "UPDATE" and (obj.get("spec") or {}) == (old.get("spec") or {})):  # type: ignore[union-attr]
                seen["malformed"] += 1
                assert not verdict.allowed and verdict.code == 422, (obj, verdict)
                assert all(p.message in verdict.message for p in malformed if p.message) or verdict.message.startswith(
                    f"placement new{i} was already claimed"
                ), (verdict.message, malformed)
            seen["allowed" if verdict.allowed else "denied"] += 1
        return seen

    before = _errors("validate")
    with caplog.at_level(logging.WARNING):
        seen = asyncio.run(run())
    assert _errors("validate") == before, "a review took the validating webhook's internal-error path"
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    # the generator reaches every outcome, and bad input in large numbers
    assert seen["allowed"] > 100 and seen["denied"] > 1000 and seen["malformed"] > 500, seen


def test_mutating_webhook_never_takes_its_internal_error_path(caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(SEED + 1)  # noqa: S311 - a reproducible fuzz, not a secret

    async def run() -> tuple[int, int]:
        cache = _cache(rng)
        kube = FakeKube(rng, cache)
        malformed = 0
        mutator = PodMutator(Settings(), cache, kube, EventRecorder(kube, "fuzz"))  # type: ignore[arg-type]
        patched = 0
        for i in range(POD_CASES):
            if i % 100 == 0:  # reopen what earlier pods claimed, so claims keep happening
                for obj in [p.raw for p in cache.all_placements()]:
                    if isinstance(obj.get("status"), dict) and obj["status"].get("phase") == "Claimed":
                        cache.apply("placements", {"type": "MODIFIED", "object": {**obj, "status": {}}})
            pod = _pod(rng, i)
            verdict = await mutator.review(parse_review(_review("CREATE", "Pod", pod, None, rng)))
            assert not any("internal error" in w for w in verdict.warnings), (pod, verdict.warnings)
            if pod_shape_problems(pod):
                malformed += 1
                assert not verdict.patch, pod  # admitted unchanged
            patched += bool(verdict.patch)
        await asyncio.sleep(0)  # let the fired Events finish
        return patched, malformed

    before = _errors("mutate")
    with caplog.at_level(logging.WARNING):
        patched, malformed = asyncio.run(run())
    assert _errors("mutate") == before
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert patched > 50 and malformed > 200, (
        patched,
        malformed,
    )  # pods were pinned along the way: the claim path ran, 409s included


def test_a_crafted_pod_is_admitted_unchanged_saying_why() -> None:
    rng = random.Random(SEED)  # noqa: S311 - a reproducible fuzz, not a secret

    async def answer(pod: dict[str, Any]) -> list[str]:
        cache = _cache(rng)
        kube = FakeKube(rng, cache)
        mutator = PodMutator(Settings(), cache, kube, EventRecorder(kube, "fuzz"))  # type: ignore[arg-type]
        verdict = await mutator.review(parse_review(_review("CREATE", "Pod", pod, None, rng)))
        assert not verdict.patch
        return verdict.warnings

    pod = _pod(rng, 0)
    pod["spec"]["containers"] = [{"name": "c", "resources": ["nvidia.com/gpu"]}]
    assert asyncio.run(answer(pod)) == [
        "hami-place: pod not examined (spec.containers[0] must be a container with resources.limits and "
        ".requests objects); admitted unchanged"
    ]
    pod = _pod(rng, 0)
    pod["metadata"]["labels"] = {"app": "web"}
    pod["spec"]["schedulerName"] = "hami-scheduler"
    pod["metadata"]["ownerReferences"] = ["web-rs"]
    assert asyncio.run(answer(pod)) == [
        "hami-place: pod not examined (metadata.ownerReferences must be a list of objects); admitted unchanged"
    ]
