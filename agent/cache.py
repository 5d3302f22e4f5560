"""The watch cache: Nodes, Pods (trimmed), HamiPodPlacements and Namespaces, read through queries.

Each resource is an informer (``informer.py``: list-then-watch, ready after its first list). Code
outside reads only through the queries below, each backed by an index kept on every event and
relist: pods by key, namespace, node, workload, UID and claim (``pod_index.py``); placements by
namespace and name, by selector for the mutating webhook (``claims.py``: O(the pod's labels), not
O(placements in the namespace)) and the open moves (``placement_index.py``); nodes by name, also as
HAMi sees them (the ``ClusterState``, kept current event by event); namespace labels. Changes are
announced through ``subscribe``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Literal

from agent.informer import Informer, Listener, SyncStatus, Unsubscribe, object_key
from agent.kube import AsyncKube
from agent.placement_index import PlacementIndex
from agent.pod_index import PodIndex
from hami_place_core import annotations as ann
from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp
from hami_place_core import surge
from hami_place_core.placement import Placement
from hami_place_core.state import ClusterState, NodeState, delete_node, delete_pod, upsert_node, upsert_pod

Resource = Literal["nodes", "pods", "placements", "namespaces", "policies"]

# surge.DELETION_COST: a surge scales down only once the mark on the pod to remove is seen.
_POD_ANNOTATIONS = (
    *ann.MODEL_POD_ANNOTATIONS,
    hp.POD_PLACEMENT,
    hp.POD_REQ_ID,
    hp.POD_CLAIM,
    hp.POD_NODE,
    surge.DELETION_COST,
)


_PLACEMENT_SPEC = ("nodeSelector", "affinity", "tolerations", "priority")


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """Only what the agent reads: a 100k-pod cluster must fit in a small container."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
            "annotations": {k: annotations[k] for k in _POD_ANNOTATIONS if k in annotations},
            "ownerReferences": meta.get("ownerReferences") or [],
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "creationTimestamp": meta.get("creationTimestamp"),
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "schedulerName": spec.get("schedulerName"),
            "containers": [
                {"name": c.get("name"), "resources": c.get("resources") or {}} for c in spec.get("containers") or ()
            ],
            # restartPolicy marks sidecars, whose requests kube-scheduler adds to the pod's
            "initContainers": [
                {"name": c.get("name"), "resources": c.get("resources") or {}, "restartPolicy": c.get("restartPolicy")}
                for c in spec.get("initContainers") or ()
            ],
            "overhead": spec.get("overhead"),
            "resources": spec.get("resources"),
            # Where a pod (or its replacement) may go, for the autopilot's planner, and its priority
            # for a policy's maxPriority: absent in most pods, so they cost little.
            **{k: spec[k] for k in _PLACEMENT_SPEC if spec.get(k) is not None},
        },
        "status": {
            "phase": (pod.get("status") or {}).get("phase"),
            # Ready and PodScheduled: workload availability, and HAMi's Filter verdict
            "conditions": [
                {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
                for c in (pod.get("status") or {}).get("conditions") or ()
                if c.get("type") in ("Ready", "PodScheduled")
            ],
        },
    }


def _trim_namespace(ns: Mapping[str, Any]) -> dict[str, Any]:
    meta = ns.get("metadata") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
        }
    }


class ClusterCache:
    def __init__(self, kube: AsyncKube, policies: bool = False) -> None:
        self.kube = kube
        self._pod_index = PodIndex()
        self._placement_index = PlacementIndex()
        # The HAMi view, kept current event by event (no rebuild on the hot path).
        self._state = ClusterState(nodes={}, pods={})
        self._nodes = Informer(kube, "/api/v1/nodes", "nodes", index=self._on_node)
        self._pods = Informer(kube, "/api/v1/pods", "pods", transform=trim_pod, index=self._on_pod)
        self._placements = Informer(
            kube,
            f"/apis/{hp.GROUP}/{hp.VERSION}/{hp.PLURAL}",
            "placements",
            index=self._placement_index.update,
        )
        self._namespaces = Informer(kube, "/api/v1/namespaces", "namespaces", transform=_trim_namespace)
        self._informers: dict[Resource, Informer] = {
            "nodes": self._nodes,
            "pods": self._pods,
            "placements": self._placements,
            "namespaces": self._namespaces,
        }
        if policies:  # the autopilot's HamiDefragPolicies (cluster-scoped); only when it runs
            self._informers["policies"] = Informer(kube, f"/apis/{dp.GROUP}/{dp.VERSION}/{dp.PLURAL}", "policies")
        self._tasks: list[asyncio.Task[None]] = []

    # ---- index maintenance (called by the informers before any subscriber) ----------------------
    def _on_node(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        if kind == "DELETED":
            delete_node(self._state, (obj.get("metadata") or {}).get("name", ""))
        else:
            upsert_node(self._state, obj)

    def _on_pod(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(obj)
        if kind == "DELETED":
            delete_pod(self._state, key)
            self._pod_index.update(key, None, old)
        else:
            upsert_pod(self._state, obj)
            self._pod_index.update(key, obj, old)

    # ---- lifecycle and health -------------------------------------------------------------------
    def start(self) -> None:
        for inf in self._informers.values():
            self._tasks.append(asyncio.create_task(inf.run(), name=f"informer-{inf.name}"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # Serving admission and placements does not need policies: a missing HamiDefragPolicy CRD (a
    # `helm upgrade` does not install new CRDs) must stop the autopilot only, not the webhooks.
    OPTIONAL: tuple[Resource, ...] = ("policies",)

    def _required(self) -> list[Informer]:
        return [i for r, i in self._informers.items() if r not in self.OPTIONAL]

    @property
    def ready(self) -> bool:
        return all(i.synced for i in self._required())

    async def wait_ready(self, timeout: float) -> bool:
        try:
            await asyncio.wait_for(asyncio.gather(*(i.wait_synced() for i in self._required())), timeout)
        except TimeoutError:
            return False
        return True

    async def wait_synced(self, resource: Resource) -> None:
        """Until the informer of `resource` has finished its first list (for ever if it never does)."""
        await self._informers[resource].wait_synced()

    def sync_status(self) -> list[SyncStatus]:
        """Per resource: synced, lists so far, the last watch error (for /readyz and /metrics)."""
        return [i.status() for i in self._informers.values()]

    def is_optional(self, name: str) -> bool:
        return name in self.OPTIONAL

    # ---- changes --------------------------------------------------------------------------------
    def subscribe(self, resource: Resource, fn: Listener) -> Unsubscribe:
        """Call fn(kind, object, replaced object or None) on every change of `resource`, after the
        cache's own indexes took it in; the returned callable unsubscribes."""
        return self._informers[resource].subscribe(fn)

    def apply(self, resource: Resource, event: Mapping[str, Any]) -> None:
        """One watch event, as if the watch delivered it: the agent's own writes show at once."""
        self._informers[resource].apply(event)

    # ---- pods -----------------------------------------------------------------------------------
    def pod(self, namespace: str, name: str | None) -> dict[str, Any] | None:
        return self._pods.get(f"{namespace}/{name}") if name else None

    def _pods_of(self, keys: Mapping[str, None] | None) -> list[dict[str, Any]]:
        if not keys:
            return []
        get = self._pods.get
        return [pod for k in keys if (pod := get(k)) is not None]

    def pods_in(self, namespace: str) -> list[dict[str, Any]]:
        return self._pods_of(self._pod_index.by_namespace.get(namespace))

    def pods_on_node(self, node: str) -> list[dict[str, Any]]:
        """The pods whose spec.nodeName is `node`."""
        return self._pods_of(self._pod_index.by_node.get(node))

    def pods_of_workload(self, workload: str | None) -> list[dict[str, Any]]:
        """The pods of one controller, by ``workload_key`` (namespace/Kind/name)."""
        return self._pods_of(self._pod_index.by_workload.get(workload)) if workload else []

    def pods_by_key(self) -> dict[str, dict[str, Any]]:
        """Every pod by namespace/name (a snapshot of the keys; the objects are the cache's own)."""
        return {object_key(p): p for p in self._pods.values()}

    def pod_by_uid(self, uid: str | None) -> dict[str, Any] | None:
        key = self._pod_index.by_uid.get(uid) if uid else None
        return self._pods.get(key) if key else None

    def pod_by_claim(self, claim: str | None) -> dict[str, Any] | None:
        """The pod carrying claim token `claim` in its annotations (the one seen last, if several)."""
        key = self._pod_index.by_claim.get(claim) if claim else None
        return self._pods.get(key) if key else None

    # ---- placements -----------------------------------------------------------------------------
    def placement(self, namespace: str, name: str) -> Placement | None:
        return self._placement_index.get(namespace, name)

    def placements_in(self, namespace: str) -> list[Placement]:
        return list(self._placement_index.by_namespace.get(namespace, {}).values())

    def all_placements(self) -> list[Placement]:
        return list(self._placement_index.all())

    def claim_candidates(self, namespace: str, labels: Mapping[str, Any]) -> list[Placement]:
        """Placements of `namespace` open for claims whose selector selects `labels`."""
        return self._placement_index.claims.candidates(namespace, labels)

    def open_moves(self) -> list[Placement]:
        """Placements with evictPod whose phase is not terminal."""
        return list(self._placement_index.open_moves.values())

    # ---- nodes and namespaces -------------------------------------------------------------------
    def node(self, name: str) -> dict[str, Any] | None:
        """The Node object as the API server last showed it."""
        return self._nodes.get(name)

    def node_state(self, name: str) -> NodeState | None:
        """The node as HAMi's scheduler sees it: GPUs, their usage, readiness, cordons."""
        return self._state.nodes.get(name)

    @property
    def state(self) -> ClusterState:
        """The HAMi view of the whole cluster (read only: the cache keeps it current)."""
        return self._state

    # ---- defrag policies ------------------------------------------------------------------------
    def policies(self) -> list[dict[str, Any]]:
        """Every HamiDefragPolicy, by name (none when the autopilot is off)."""
        inf = self._informers.get("policies")
        return [] if inf is None else sorted(inf.values(), key=lambda o: str((o.get("metadata") or {}).get("name")))

    def policy(self, name: str) -> dict[str, Any] | None:
        inf = self._informers.get("policies")
        return None if inf is None else inf.get(name)

    def serves(self, namespace: str, excluded: tuple[str, ...], wanted: Mapping[str, str]) -> bool:
        """Does an agent excluding `excluded` and selecting namespaces labelled `wanted` act there?"""
        if namespace in excluded:
            return False
        if not wanted:
            return True
        labels = self.namespace_labels(namespace)
        return all(labels.get(k) == v for k, v in wanted.items())

    def namespace_labels(self, name: str) -> dict[str, str]:
        return dict(((self._namespaces.get(name) or {}).get("metadata") or {}).get("labels") or {})
