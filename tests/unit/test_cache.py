"""The watch cache's queries: indexes fed by watch events and relists, without an API server."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.cache import ClusterCache, Resource
from agent.informer import object_key
from agent.placement_index import PlacementIndex
from agent.pod_index import PodIndex
from hami_place_core import placement as hp
from hami_place_core.annotations import GpuDevice
from testbed.hami.simulate import gpu_uuid, node_manifest

PATHS: dict[Resource, str] = {
    "nodes": "/api/v1/nodes",
    "pods": "/api/v1/pods",
    "placements": f"/apis/{hp.GROUP}/{hp.VERSION}/{hp.PLURAL}",
    "namespaces": "/api/v1/namespaces",
}


class ListingKube:
    """Only what a relist calls: the objects of each path, as set by the test."""

    def __init__(self) -> None:
        self.objects: dict[str, list[dict[str, Any]]] = {}
        self.lists = 0

    async def list_all(self, path: str) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return list(self.objects.get(path, [])), str(1000 + self.lists)


def new_cache() -> tuple[ClusterCache, ListingKube]:
    kube = ListingKube()
    return ClusterCache(kube), kube  # type: ignore[arg-type]


def relist(cache: ClusterCache, kube: ListingKube, resource: Resource, objects: list[dict[str, Any]]) -> None:
    """A relist through the informer's own path (as after a 410 Gone)."""
    kube.objects[PATHS[resource]] = objects
    asyncio.run(cache._informers[resource].relist())


def event(cache: ClusterCache, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
    cache.apply(resource, {"type": kind, "object": obj})


def pod(
    name: str,
    ns: str = "ns",
    node: str | None = None,
    owner: str | None = None,
    uid: str | None = None,
    claim: str | None = None,
    rv: str = "1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}", "resourceVersion": rv}
    if owner:
        kind, _, oname = owner.partition("/")
        meta["ownerReferences"] = [{"kind": kind, "name": oname, "controller": True}]
    if claim:
        meta["annotations"] = {hp.POD_CLAIM: claim, "unrelated": "trimmed away"}
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}


def placement(name: str, ns: str = "ns", phase: str | None = None, evict: str | None = None, rv: str = "1") -> dict:
    spec: dict[str, Any] = {
        "reqID": f"req-{name}",
        "podSelector": {"matchLabels": {"app": name}},
        "nodeName": "n1",
        "gpuDevices": ["gpu-0"],
    }
    if evict:
        spec["evictPod"] = evict
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv, "creationTimestamp": "2025-01-01T00:00:00Z"},
        "spec": spec,
        "status": {"phase": phase} if phase else {},
    }


def names(pods: list[dict[str, Any]]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def rebuilt(cache: ClusterCache) -> dict[str, Any]:
    """The pod index a fresh build from the store gives."""
    index = PodIndex()
    for p in cache._pods.values():
        index.update(object_key(p), p, None)
    return index.snapshot()


def placement_tables(index: PlacementIndex) -> tuple[dict[str, Any], list[str]]:
    by_ns = {ns: {n: p.resource_version for n, p in b.items()} for ns, b in index.by_namespace.items()}
    return by_ns, sorted(index.open_moves)


# ---- pods ---------------------------------------------------------------------------------------------
def test_pod_queries_answer_from_the_indexes() -> None:
    cache, _ = new_cache()
    event(cache, "pods", "ADDED", pod("a", node="n1", owner="ReplicaSet/web", claim="c1"))
    event(cache, "pods", "ADDED", pod("b", node="n1", owner="ReplicaSet/web"))
    event(cache, "pods", "ADDED", pod("c", ns="other", node="n2", owner="ReplicaSet/web"))
    event(cache, "pods", "ADDED", pod("lone"))

    assert cache.pod("ns", "a") is not None and cache.pod("ns", "missing") is None
    assert cache.pod("ns", None) is None and cache.pod("ns", "") is None
    assert names(cache.pods_in("ns")) == ["a", "b", "lone"] and names(cache.pods_in("other")) == ["c"]
    assert names(cache.pods_on_node("n1")) == ["a", "b"] and cache.pods_on_node("nowhere") == []
    # the workload key carries the namespace: other/ReplicaSet/web is another workload
    assert names(cache.pods_of_workload("ns/ReplicaSet/web")) == ["a", "b"]
    assert names(cache.pods_of_workload("other/ReplicaSet/web")) == ["c"]
    assert cache.pods_of_workload(None) == [] and cache.pods_of_workload("") == []
    assert names([cache.pod_by_uid("uid-ns-b")]) == ["b"]  # type: ignore[list-item]
    assert cache.pod_by_uid("nope") is None and cache.pod_by_uid(None) is None
    assert names([cache.pod_by_claim("c1")]) == ["a"]  # type: ignore[list-item]
    assert cache.pod_by_claim(None) is None and cache.pod_by_claim("") is None
    # the store holds trimmed pods: the index answers with them
    assert cache.pod_by_claim("c1")["metadata"]["annotations"] == {hp.POD_CLAIM: "c1"}  # type: ignore[index]
    assert cache._pod_index.snapshot() == rebuilt(cache)


def test_a_pod_moving_nodes_changing_owner_uid_and_claim_is_refiled() -> None:
    cache, _ = new_cache()
    event(cache, "pods", "ADDED", pod("a", owner="ReplicaSet/one", claim="c1"))  # not scheduled yet
    assert cache.pods_on_node("n1") == []
    event(cache, "pods", "MODIFIED", pod("a", node="n1", owner="ReplicaSet/one", claim="c1", rv="2"))
    assert names(cache.pods_on_node("n1")) == ["a"]
    event(cache, "pods", "MODIFIED", pod("a", node="n2", owner="StatefulSet/two", uid="new", claim="c2", rv="3"))
    assert cache.pods_on_node("n1") == [] and names(cache.pods_on_node("n2")) == ["a"]
    assert cache.pods_of_workload("ns/ReplicaSet/one") == []
    assert names(cache.pods_of_workload("ns/StatefulSet/two")) == ["a"]
    assert cache.pod_by_uid("uid-ns-a") is None and names([cache.pod_by_uid("new")]) == ["a"]  # type: ignore[list-item]
    assert cache.pod_by_claim("c1") is None and names([cache.pod_by_claim("c2")]) == ["a"]  # type: ignore[list-item]
    # empty buckets go: a node or workload that had pods costs nothing once they left
    assert "n1" not in cache._pod_index.by_node and "ns/ReplicaSet/one" not in cache._pod_index.by_workload
    event(cache, "pods", "MODIFIED", pod("a", rv="4"))  # owner, node and claim all gone
    assert cache.pods_on_node("n2") == [] and cache.pods_of_workload("ns/StatefulSet/two") == []
    assert cache.pod_by_claim("c2") is None
    assert cache._pod_index.snapshot() == rebuilt(cache)


def test_deleted_pods_leave_every_index_and_an_unknown_delete_changes_nothing() -> None:
    cache, _ = new_cache()
    seen: list[tuple[str, str, bool]] = []
    cache.subscribe("pods", lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"], old is None)))
    event(cache, "pods", "ADDED", pod("a", node="n1", owner="ReplicaSet/web", claim="c1"))
    before = cache._pod_index.snapshot()
    event(cache, "pods", "DELETED", pod("ghost", node="n1", owner="ReplicaSet/web", claim="c1"))
    assert cache._pod_index.snapshot() == before  # "ghost" was never stored: nothing of "a" goes
    assert names([cache.pod_by_claim("c1")]) == ["a"]  # type: ignore[list-item]
    assert ("DELETED", "ghost", True) in seen  # subscribers still hear of it (old is None)
    # the final object of a DELETED may differ from the stored one: what was filed is what goes
    event(cache, "pods", "DELETED", pod("a", node="n9", rv="7"))
    assert cache._pod_index.snapshot() == {"namespace": {}, "node": {}, "workload": {}, "uid": {}, "claim": {}}
    assert cache.pod("ns", "a") is None


def test_a_claim_two_pods_carry_belongs_to_the_pod_seen_last() -> None:
    cache, _ = new_cache()
    event(cache, "pods", "ADDED", pod("a", claim="c"))
    event(cache, "pods", "ADDED", pod("copy", claim="c"))  # created from a pinned manifest
    assert names([cache.pod_by_claim("c")]) == ["copy"]  # type: ignore[list-item]
    event(cache, "pods", "MODIFIED", pod("a", claim="c", rv="2"))
    assert names([cache.pod_by_claim("c")]) == ["a"]  # type: ignore[list-item]
    event(cache, "pods", "DELETED", pod("copy", claim="c"))
    assert names([cache.pod_by_claim("c")]) == ["a"]  # type: ignore[list-item]  # not the deleted one's entry


def test_a_relist_drops_adds_and_refiles_and_keeps_unchanged_objects() -> None:
    cache, kube = new_cache()
    relist(cache, kube, "pods", [pod("a", node="n1"), pod("b", node="n1", owner="ReplicaSet/web"), pod("c")])
    kept = cache.pod("ns", "a")
    event(cache, "pods", "ADDED", pod("watched", node="n1"))  # seen only on the watch, gone by the next list
    kinds: list[tuple[str, str]] = []
    views: list[list[str]] = []

    def listener(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        kinds.append((kind, obj["metadata"]["name"]))
        views.append(names(cache.pods_on_node("n1")))  # what a subscriber sees while the relist is announced

    cache.subscribe("pods", listener)
    relist(cache, kube, "pods", [pod("a", node="n1"), pod("b", node="n2", owner="ReplicaSet/web", rv="2"), pod("d")])
    assert sorted(kinds) == [("ADDED", "d"), ("DELETED", "c"), ("DELETED", "watched"), ("MODIFIED", "b")]
    assert views == [["a"]] * 4  # every index was current before the first subscriber was called
    assert cache.pod("ns", "a") is kept  # same resourceVersion: the stored object stays
    assert names(cache.pods_in("ns")) == ["a", "b", "d"] and names(cache.pods_on_node("n2")) == ["b"]
    assert cache.pod_by_uid("uid-ns-c") is None and cache.pod_by_uid("uid-ns-watched") is None
    assert cache._pod_index.snapshot() == rebuilt(cache)
    assert set(cache.state.pod_requests) == {"ns/a", "ns/b"}  # the HAMi view followed the relist too
    relist(cache, kube, "pods", [])
    assert cache._pod_index.snapshot() == {"namespace": {}, "node": {}, "workload": {}, "uid": {}, "claim": {}}


_NAMES = st.sampled_from(["a", "b", "c", "d"])
_POD = st.builds(
    lambda name, ns, node, owner, uid, claim: pod(
        name, ns, node, owner, f"u-{ns}-{name}-{uid}", f"c-{ns}-{name}" if claim else None
    ),
    _NAMES,
    st.sampled_from(["ns", "other"]),
    st.sampled_from([None, "n1", "n2"]),
    st.sampled_from([None, "ReplicaSet/x", "StatefulSet/y"]),
    st.integers(0, 1),
    st.booleans(),
)
_OP = st.one_of(
    st.tuples(st.sampled_from(["ADDED", "MODIFIED", "DELETED"]), _POD),
    st.tuples(st.just("RELIST"), st.lists(_POD, max_size=5)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_OP, max_size=12))
def test_the_pod_index_always_equals_a_rebuild_from_the_store(ops: list[tuple[str, Any]]) -> None:
    cache, kube = new_cache()
    for n, (kind, arg) in enumerate(ops):
        if kind == "RELIST":
            unique = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in arg}
            for p in unique.values():
                p["metadata"]["resourceVersion"] = str(n)
            relist(cache, kube, "pods", list(unique.values()))
        else:
            arg["metadata"]["resourceVersion"] = str(n)
            event(cache, "pods", kind, arg)
        assert cache._pod_index.snapshot() == rebuilt(cache)


# ---- placements -----------------------------------------------------------------------------------------
def test_placement_queries_and_the_open_moves_follow_events() -> None:
    cache, _ = new_cache()
    event(cache, "placements", "ADDED", placement("pin"))
    event(cache, "placements", "ADDED", placement("mv", evict="victim"))
    event(cache, "placements", "ADDED", placement("far", ns="other"))
    assert cache.placement("ns", "pin") is not None and cache.placement("ns", "nope") is None
    assert sorted(p.name for p in cache.placements_in("ns")) == ["mv", "pin"] and cache.placements_in("x") == []
    assert sorted(p.key for p in cache.all_placements()) == ["ns/mv", "ns/pin", "other/far"]
    assert [p.name for p in cache.claim_candidates("ns", {"app": "pin"})] == ["pin"]
    assert [p.key for p in cache.open_moves()] == ["ns/mv"]
    event(cache, "placements", "MODIFIED", placement("mv", phase=hp.EVICTING, evict="victim", rv="2"))
    assert [p.phase for p in cache.open_moves()] == [hp.EVICTING]  # the index holds the newest version
    event(cache, "placements", "MODIFIED", placement("mv", phase=hp.COMPLETED, evict="victim", rv="3"))
    assert cache.open_moves() == [] and cache.placement("ns", "mv").phase == hp.COMPLETED  # type: ignore[union-attr]
    event(cache, "placements", "MODIFIED", placement("pin", phase=hp.CLAIMED, rv="2"))
    assert cache.claim_candidates("ns", {"app": "pin"}) == []  # claimed: no longer open for claims
    event(cache, "placements", "DELETED", placement("far", ns="other"))
    assert cache.placement("other", "far") is None and "other" not in cache._placement_index.by_namespace
    event(cache, "placements", "DELETED", placement("never-seen"))  # harmless


def test_a_placement_relist_drops_what_is_gone_from_every_index() -> None:
    cache, kube = new_cache()
    relist(cache, kube, "placements", [placement("a"), placement("mv", evict="v"), placement("b", ns="other")])
    assert [p.key for p in cache.open_moves()] == ["ns/mv"] and len(cache.all_placements()) == 3
    relist(cache, kube, "placements", [placement("a"), placement("c", evict="w")])
    assert sorted(p.key for p in cache.all_placements()) == ["ns/a", "ns/c"]
    assert [p.key for p in cache.open_moves()] == ["ns/c"] and cache.claim_candidates("other", {"app": "b"}) == []
    fresh = PlacementIndex()
    for obj in cache._placements.values():
        fresh.update("ADDED", obj, None)
    assert placement_tables(cache._placement_index) == placement_tables(fresh)


# ---- nodes and namespaces -------------------------------------------------------------------------------
def test_nodes_by_name_raw_and_as_hami_sees_them() -> None:
    cache, kube = new_cache()
    gpu = GpuDevice(uuid=gpu_uuid("n1", 0), index=0, count=10, devmem=81920, devcore=100, type="A100", health=True)
    devices = [gpu]
    event(cache, "nodes", "ADDED", node_manifest("n1", devices))
    assert cache.node("n1")["metadata"]["name"] == "n1"  # type: ignore[index]
    assert [g.uuid for g in cache.node_state("n1").devices] == [gpu_uuid("n1", 0)]  # type: ignore[union-attr]
    assert cache.node("n2") is None and cache.node_state("n2") is None
    relist(cache, kube, "nodes", [])
    assert cache.node("n1") is None and cache.node_state("n1") is None


def test_namespace_labels_follow_events_and_relists() -> None:
    cache, kube = new_cache()
    event(cache, "namespaces", "ADDED", {"metadata": {"name": "ns", "resourceVersion": "1", "labels": {"a": "b"}}})
    labels = cache.namespace_labels("ns")
    assert labels == {"a": "b"} and cache.namespace_labels("nope") == {}
    labels["x"] = "y"  # a copy: the caller cannot change the cache
    assert cache.namespace_labels("ns") == {"a": "b"}
    relist(cache, kube, "namespaces", [])
    assert cache.namespace_labels("ns") == {}


# ---- subscriptions and health ---------------------------------------------------------------------------
def test_unsubscribe_stops_delivery_once_and_a_failing_listener_harms_nobody() -> None:
    cache, _ = new_cache()
    got: list[str] = []

    def broken(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        raise RuntimeError("listener bug")

    def leaving(kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        got.append("leaving:" + obj["metadata"]["name"])
        stop_leaving()  # unsubscribing while the event is delivered

    cache.subscribe("placements", broken)
    stop_leaving = cache.subscribe("placements", leaving)
    stop = cache.subscribe("placements", lambda kind, obj, old: got.append(obj["metadata"]["name"]))
    event(cache, "placements", "ADDED", placement("one"))
    assert got == ["leaving:one", "one"] and cache.placement("ns", "one") is not None
    stop()
    stop()  # a second call changes nothing
    event(cache, "placements", "ADDED", placement("two"))
    assert got == ["leaving:one", "one"] and cache.placement("ns", "two") is not None
    again = cache.subscribe("placements", lambda kind, obj, old: got.append("again"))
    event(cache, "placements", "DELETED", placement("two"))
    again()
    assert got[-1] == "again"


def test_sync_status_and_readiness_come_from_the_informers() -> None:
    cache, kube = new_cache()
    assert not cache.ready
    assert [(s.name, s.synced, s.relists, s.last_error) for s in cache.sync_status()] == [
        ("nodes", False, 0, None),
        ("pods", False, 0, None),
        ("placements", False, 0, None),
        ("namespaces", False, 0, None),
    ]
    relist(cache, kube, "pods", [pod("a")])
    assert [s.relists for s in cache.sync_status()] == [0, 1, 0, 0]

    async def start() -> bool:
        cache.start()
        try:
            return await cache.wait_ready(5)
        finally:
            await cache.stop()

    kube.watch = _idle_watch  # type: ignore[attr-defined]
    assert asyncio.run(start()) and cache.ready
    assert [s.synced for s in cache.sync_status()] == [True] * 4


async def _idle_watch(path: str, rv: str):  # type: ignore[no-untyped-def]
    await asyncio.sleep(3600)
    yield {}


# ---- the mover's reads --------------------------------------------------------------------------------
def _ready_pod(name: str, owner: str, ready: bool = True, **kw: Any) -> dict[str, Any]:
    p = pod(name, owner=owner, **kw)
    p["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return p


def test_the_movers_limits_and_replacement_check_read_one_workloads_pods() -> None:
    from agent.config import Settings
    from agent.mover import Mover
    from hami_place_core.placement import Placement

    cache, _ = new_cache()
    mover = Mover(Settings(max_unavailable_per_workload=2), cache, None, None)  # type: ignore[arg-type]
    for name in ("web-a", "web-b"):
        event(cache, "pods", "ADDED", _ready_pod(name, "ReplicaSet/web"))
    event(cache, "pods", "ADDED", _ready_pod("db-a", "StatefulSet/db", ready=False))  # another workload
    event(cache, "pods", "ADDED", _ready_pod("db-b", "StatefulSet/db", ready=False))
    web_a = cache.pod("ns", "web-a")
    assert web_a is not None
    assert mover._sibling_uids(web_a) == ["uid-ns-web-a", "uid-ns-web-b"]
    move = Placement.from_object(placement("mv", evict="web-a"))
    assert mover._limit_reason(move, web_a) is None  # db's unready pods are not web's
    event(cache, "pods", "MODIFIED", _ready_pod("web-b", "ReplicaSet/web", ready=False, rv="2"))
    # another move of web in flight, plus web-b unready: two unavailable
    flying = placement("other", phase=hp.WAITING, evict="web-b")
    flying["status"].update({"moveStartedAt": "2025-01-01T00:00:00Z", "workload": "ns/ReplicaSet/web"})
    event(cache, "placements", "ADDED", flying)
    assert [p.name for p in mover._in_flight()] == ["other"]
    assert mover._limit_reason(move, web_a) == "workload ReplicaSet/web has 2 pod(s) unavailable or moving (limit 2)"
    # a new pod of web without a claim while a move waits: the replacement was admitted unpinned
    flying["status"]["siblingUIDs"] = ["uid-ns-web-a", "uid-ns-web-b"]
    waiting = Placement.from_object(flying)
    assert mover._unpinned_replacement(waiting) is None
    event(cache, "pods", "ADDED", _ready_pod("db-c", "StatefulSet/db"))
    assert mover._unpinned_replacement(waiting) is None  # another workload's new pod
    event(cache, "pods", "ADDED", _ready_pod("web-c", "ReplicaSet/web", claim="token"))
    assert mover._unpinned_replacement(waiting) is None  # pinned
    event(cache, "pods", "ADDED", _ready_pod("web-d", "ReplicaSet/web"))
    assert mover._unpinned_replacement(waiting) == "web-d"
