"""Surge moves: whether a pod's workload can take one replica more, and which object to scale.

A surge move pins the workload's next pod to the target, adds one replica, waits until the new
pod is Ready there, marks the old pod as the one the ReplicaSet controller removes first
(``controller.kubernetes.io/pod-deletion-cost``) and scales back. It is safe only where hami-place
alone changes the replica count for that while: this module says why not, in the words the
placement's status and the CLI show. Pure: the agent reads the objects (``agent/surge.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The ReplicaSet controller removes pods with the lowest cost first (pkg/controller/replicaset,
# getPodsRankedByRelatedPodsOnSameNode / controller.ActivePodsWithRanks; the annotation is an
# int32). The lowest value puts the pod ahead of any sibling a user gave a cost.
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
REMOVE_FIRST = str(-(2**31))
REVISION = "deployment.kubernetes.io/revision"


class SurgeRefused(Exception):
    """Why a surge move cannot be made for this pod; nothing was changed."""


@dataclass(frozen=True)
class ScaleTarget:
    """The object whose replicas a surge raises: a Deployment, or a ReplicaSet without one."""

    kind: str  # "Deployment" or "ReplicaSet"
    name: str
    replicas: int  # spec.replicas now

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    def scale_path(self, namespace: str) -> str:
        plural = "deployments" if self.kind == "Deployment" else "replicasets"
        return f"/apis/apps/v1/namespaces/{namespace}/{plural}/{self.name}/scale"


def controller_of(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    refs = (obj.get("metadata") or {}).get("ownerReferences") or ()
    return next((o for o in refs if isinstance(o, Mapping) and o.get("controller")), None)


def owner_kind(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    ref = controller_of(pod)
    return (str(ref.get("kind")), str(ref.get("name"))) if ref else None


def refuse_owner(pod: Mapping[str, Any]) -> None:
    """Only a ReplicaSet's pods surge: a StatefulSet's pod keeps its name (there is no second one
    to start next to it), a Job's pods are runs, not replicas."""
    owner = owner_kind(pod)
    name = (pod.get("metadata") or {}).get("name")
    if owner is None:
        raise SurgeRefused(f"pod {name} has no controller: there is no replica count to raise")
    kind, owner_name = owner
    if kind != "ReplicaSet":
        raise SurgeRefused(
            f"pod {name} belongs to {kind} {owner_name}: surge moves only pods of a Deployment or ReplicaSet "
            "(use --strategy evict)"
        )


def _replicas(obj: Mapping[str, Any]) -> int:
    value = (obj.get("spec") or {}).get("replicas", 1)
    return value if isinstance(value, int) and not isinstance(value, bool) else 1


def _status(obj: Mapping[str, Any], key: str) -> int:
    value = (obj.get("status") or {}).get(key) or 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _refuse_deployment(rs: Mapping[str, Any], deployment: Mapping[str, Any]) -> None:
    name = (deployment.get("metadata") or {}).get("name")
    meta = deployment.get("metadata") or {}
    spec = deployment.get("spec") or {}
    if spec.get("paused"):
        raise SurgeRefused(f"Deployment {name} is paused: a surge would not take effect until it is resumed")
    want = _replicas(deployment)
    generation, observed = meta.get("generation") or 0, _status(deployment, "observedGeneration")
    updated, total, available = (_status(deployment, k) for k in ("updatedReplicas", "replicas", "availableReplicas"))
    current = ((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION)
    revision = (meta.get("annotations") or {}).get(REVISION)
    # kubectl rollout status's test of a finished rollout, plus: the pod's ReplicaSet is the current one.
    if observed < generation or updated < want or total > updated or available < updated or current != revision:
        raise SurgeRefused(
            f"Deployment {name} is mid-rollout ({updated} of {want} replicas updated, {available} available, "
            f"{total} in total): wait until `kubectl rollout status deployment/{name}` finishes"
        )


def _refuse_other_owner(obj: Mapping[str, Any], kind: str) -> None:
    ref = controller_of(obj)
    if ref is not None:
        name = (obj.get("metadata") or {}).get("name")
        raise SurgeRefused(
            f"{kind} {name} is controlled by {ref.get('kind')} {ref.get('name')}, which may reset its replica count"
        )


def _refuse_autoscaler(target: ScaleTarget, hpas: Iterable[Mapping[str, Any]], rs_name: str) -> None:
    for hpa in hpas:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if (ref.get("kind"), ref.get("name")) in ((target.kind, target.name), ("ReplicaSet", rs_name)):
            hpa_name = (hpa.get("metadata") or {}).get("name")
            raise SurgeRefused(
                f"HorizontalPodAutoscaler {hpa_name} owns the replica count of {ref.get('kind')} {ref.get('name')}: "
                "it would undo the added replica (use --strategy evict)"
            )


def scale_target(
    rs: Mapping[str, Any], deployment: Mapping[str, Any] | None, hpas: Iterable[Mapping[str, Any]]
) -> ScaleTarget:
    """What to scale for a pod of `rs` (its Deployment when it has one), or SurgeRefused: an
    autoscaler or another controller owns the count, the Deployment is paused or mid-rollout, or
    the ReplicaSet is not at its count."""
    rs_name = str((rs.get("metadata") or {}).get("name"))
    if deployment is not None:
        _refuse_other_owner(deployment, "Deployment")
        _refuse_deployment(rs, deployment)
        target = ScaleTarget("Deployment", str((deployment.get("metadata") or {}).get("name")), _replicas(deployment))
    else:
        owner = controller_of(rs)
        if owner is not None:  # owned by something this module does not know (an operator, Argo Rollouts)
            _refuse_other_owner(rs, "ReplicaSet")
        want = _replicas(rs)
        if _status(rs, "replicas") != want or _status(rs, "readyReplicas") < want:
            raise SurgeRefused(
                f"ReplicaSet {rs_name} is not settled ({_status(rs, 'readyReplicas')} of {want} replicas Ready)"
            )
        target = ScaleTarget("ReplicaSet", rs_name, want)
    _refuse_autoscaler(target, hpas, rs_name)
    if target.replicas < 1:
        raise SurgeRefused(f"{target.ref} is scaled to 0")
    return target


def replica_patch(expected: int, new: int) -> list[dict[str, Any]]:
    """A JSON patch of the scale subresource that applies only while the count is `expected`: a
    count someone else changed meanwhile is never overwritten (the server answers 422)."""
    return [
        {"op": "test", "path": "/spec/replicas", "value": expected},
        {"op": "replace", "path": "/spec/replicas", "value": new},
    ]
