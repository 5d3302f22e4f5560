"""HamiPodPlacement objects: the CR's fields, its phases, and what pinning does to a pod.

Pinning follows HAMi's own mechanisms, never ``spec.nodeName`` (HAMi's webhook denies such pods,
``pkg/scheduler/webhook.go``, and they would skip the extender's Filter):
- a required node affinity ``matchFields metadata.name In [node]``: kube-scheduler enforces it
  before HAMi's extender sees the node list (the extender is ``nodeCacheCapable``);
- ``nvidia.com/use-gpuuuid`` = exactly the target UUIDs and ``nvidia.com/gpu`` = their count, so
  HAMi's Fit (``CheckUUID`` in ``pkg/device/devices.go``) can only pick those GPUs;
- for ``gpu-N/P``, ``nvidia.com/gpumem-percentage`` and ``nvidia.com/gpucores`` = P (and no
  ``nvidia.com/gpumem``, which would win over the percentage at Fit time).
The patch is idempotent: HAMi's webhook may run after ours, and ours is reinvoked (IfNeeded).
"""

from __future__ import annotations

import copy
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.requests import HAMI_RESOURCES, RES_CORES, RES_GPU, RES_MEM, RES_MEM_PCT
from hami_place_core.targets import TargetError, TargetSpec, parse_targets

GROUP = "scheduling.hami.placement.com"
VERSION = "v1"
PLURAL = "hamipodplacements"
KIND = "HamiPodPlacement"
API_VERSION = f"{GROUP}/{VERSION}"

PENDING, CLAIMED, BOUND, EVICTING, WAITING, COMPLETED, FAILED, CANCELLED = (
    "Pending",
    "Claimed",
    "Bound",
    "Evicting",
    "WaitingForPod",
    "Completed",
    "Failed",
    "Cancelled",
)
TERMINAL = (COMPLETED, FAILED, CANCELLED)

# Annotations written on a pinned pod: they link it to its placement before the pod has a name
# or uid (a ReplicaSet's pod arrives with generateName only).
POD_PLACEMENT = f"{GROUP}/placement"
POD_REQ_ID = f"{GROUP}/req-id"
POD_CLAIM = f"{GROUP}/claim"
POD_NODE = f"{GROUP}/node"
# The pod's own nvidia.com/use-gpuuuid before a pin replaced it (set only when it had one), so the
# planner can tell the workload's constraint, which its next pod carries again, from the pin.
POD_ORIGINAL_USE_GPU_UUID = f"{GROUP}/original-use-gpuuuid"


def placement_path(namespace: str, name: str | None = None, status: bool = False) -> str:
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    if name is None:
        return base
    return f"{base}/{name}" + ("/status" if status else "")


@dataclass(frozen=True)
class Placement:
    namespace: str
    name: str
    uid: str
    resource_version: str
    generation: int
    req_id: str
    selector: dict[str, Any]
    node: str
    gpu_devices: tuple[str, ...]
    targets: TargetSpec | None
    target_error: str | None
    evict_pod: str | None
    phase: str
    status: dict[str, Any]
    raw: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def claim(self) -> str | None:
        return self.status.get("claim")

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Placement:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        devices = spec.get("gpuDevices") or []
        targets, error = None, None
        try:
            targets = parse_targets(list(devices))
        except TargetError as e:
            error = str(e)
        return cls(
            namespace=meta.get("namespace", ""),
            name=meta.get("name", ""),
            uid=meta.get("uid", ""),
            resource_version=meta.get("resourceVersion", ""),
            generation=int(meta.get("generation") or 0),
            req_id=str(spec.get("reqID") or ""),
            selector=dict(spec.get("podSelector") or {}),
            node=str(spec.get("nodeName") or ""),
            gpu_devices=tuple(str(d) for d in devices),
            targets=targets,
            target_error=error,
            evict_pod=spec.get("evictPod") or None,
            phase=str(status.get("phase") or PENDING),
            status=dict(status),
            raw=dict(obj),
        )


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _gpu_containers(spec: Mapping[str, Any]) -> list[int]:
    """Containers that ask HAMi for GPUs; if none does, the first container gets the GPUs."""
    found = []
    for i, c in enumerate(spec.get("containers") or ()):
        res = c.get("resources") or {}
        names = set(res.get("limits") or {}) | set(res.get("requests") or {})
        if names & set(HAMI_RESOURCES):
            found.append(i)
    return found or [0]


def pin_patch(
    pod: Mapping[str, Any], node: str, uuids: list[str], targets: TargetSpec, link: dict[str, str]
) -> list[dict[str, Any]]:
    """JSONPatch operations that pin `pod` to `uuids` on `node`. Applying it twice is a no-op."""
    ops: list[dict[str, Any]] = []
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}

    annotations = meta.get("annotations")
    wanted = {ann.USE_GPU_UUID: ann.join_list(uuids), **link}
    # Only on the first pin (no link annotation yet), so a reinvocation changes nothing.
    if annotations and ann.USE_GPU_UUID in annotations and not any(k in annotations for k in link):
        wanted[POD_ORIGINAL_USE_GPU_UUID] = annotations[ann.USE_GPU_UUID]
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
    else:
        for k, v in wanted.items():
            if annotations.get(k) != v:
                ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(k)}", "value": v})

    term = {"key": "metadata.name", "operator": "In", "values": [node]}
    affinity = copy.deepcopy(spec.get("affinity") or {})
    node_aff = affinity.setdefault("nodeAffinity", {})
    required = node_aff.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.setdefault("nodeSelectorTerms", [])
    changed = False
    if not terms:
        terms.append({"matchFields": [term]})
        changed = True
    # nodeSelectorTerms are ORed: the pin must be ANDed into every one of them.
    for t in terms:
        fields = t.setdefault("matchFields", [])
        if term not in fields:
            fields.append(term)
            changed = True
    if changed:
        ops.append({"op": "add", "path": "/spec/affinity", "value": affinity})

    wanted_res = targets.resources()
    for i in _gpu_containers(spec):
        containers = spec.get("containers") or []
        if i >= len(containers):
            continue
        res = containers[i].get("resources") or {}
        limits = dict(res.get("limits") or {})
        requests = dict(res.get("requests") or {})
        # gpu-N keeps the pod's own memory/cores request; gpu-N/P replaces it with P%.
        new_limits = {**limits, **wanted_res}
        if targets.percent is not None:
            new_limits.pop(RES_MEM, None)
        new_requests = {k: v for k, v in requests.items() if k not in (RES_GPU, RES_MEM, RES_MEM_PCT, RES_CORES)}
        new_requests.update({k: v for k, v in new_limits.items() if k in (RES_GPU, RES_MEM_PCT, RES_CORES)})
        if new_limits != limits or new_requests != requests:
            ops.append(
                {
                    "op": "add",
                    "path": f"/spec/containers/{i}/resources",
                    "value": {**res, "limits": new_limits, "requests": new_requests},
                }
            )
    return ops


def workload_key(pod: Mapping[str, Any] | None, namespace: str | None = None) -> str | None:
    """namespace/Kind/name of the pod's controller (None for a standalone pod)."""
    if not pod:
        return None
    meta = pod.get("metadata") or {}
    ref = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    return f"{namespace or meta.get('namespace')}/{ref.get('kind')}/{ref.get('name')}" if ref else None


def link_annotations(p: Placement, claim: str) -> dict[str, str]:
    return {POD_PLACEMENT: p.name, POD_REQ_ID: p.req_id, POD_CLAIM: claim, POD_NODE: p.node}


# --- building placements (the CLI's pin/move/evict and the planner's manifests) ---------------------

STS_POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
CREATED_BY_LABEL = f"{GROUP}/created-by"
_NAME_SAFE = re.compile(r"[^a-z0-9-]+")


def new_req_id() -> str:
    """A random reqID: 10 lowercase hex characters, well inside the CRD's 5-63 and its pattern."""
    return secrets.token_hex(5)


def placement_name(base: str, req_id: str) -> str:
    """`<base>-<reqID>` as a DNS-1123 name: the object's name says what it places and stays unique."""
    stem = _NAME_SAFE.sub("-", base.lower()).strip("-")[: 253 - len(req_id) - 1] or "placement"
    return f"{stem}-{_NAME_SAFE.sub('-', req_id.lower()).strip('-')}"


def new_placement(
    namespace: str,
    name: str,
    req_id: str,
    selector: Mapping[str, Any],
    node: str,
    gpu_devices: list[str] | tuple[str, ...],
    evict_pod: str | None = None,
    created_by: str = "kubectl-hami-place",
) -> dict[str, Any]:
    """A HamiPodPlacement manifest. The spec is validated here as the CRD would (gpuDevices) so the
    caller fails early with the same wording; the agent's validating webhook has the last word."""
    parse_targets(list(gpu_devices))
    spec: dict[str, Any] = {
        "reqID": req_id,
        "podSelector": copy.deepcopy(dict(selector)),
        "nodeName": node,
        "gpuDevices": list(gpu_devices),
    }
    if evict_pod:
        spec["evictPod"] = evict_pod
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {CREATED_BY_LABEL: created_by}},
        "spec": spec,
    }


def replacement_selector(pod: Mapping[str, Any], owner: Mapping[str, Any] | None) -> dict[str, Any]:
    """The podSelector that matches the pod's replacement, from its controller's own selector.

    A ReplicaSet's replacement is any new pod of that ReplicaSet (its selector carries
    pod-template-hash, so a rollout's new ReplicaSet is not matched). A StatefulSet recreates the
    pod under the same name, so the selector also pins the `statefulset.kubernetes.io/pod-name`
    label: no sibling replica can take the placement. Without an owner (a standalone pod) the pod's
    own labels are used; the agent refuses to evict such a pod anyway (nothing would recreate it).
    """
    meta = pod.get("metadata") or {}
    if owner is not None:
        selector = copy.deepcopy(dict((owner.get("spec") or {}).get("selector") or {}))
        if owner.get("kind") == "StatefulSet" and meta.get("name"):
            selector.setdefault("matchLabels", {})[STS_POD_NAME_LABEL] = meta["name"]
        if selector.get("matchLabels") or selector.get("matchExpressions"):
            return selector
    labels = dict(meta.get("labels") or {})
    if not labels:
        raise TargetError(f"pod {meta.get('name')} has no labels and no controller selector to match its replacement")
    return {"matchLabels": labels}


def placement_view(p: Placement) -> dict[str, Any]:
    """The flat view of a placement the REST API, its SSE stream and the CLI's progress all use."""
    return {
        "namespace": p.namespace,
        "name": p.name,
        "reqID": p.req_id,
        "nodeName": p.node,
        "gpuDevices": list(p.gpu_devices),
        "evictPod": p.evict_pod,
        "phase": p.phase,
        "reason": p.status.get("reason"),
        "message": p.status.get("message"),
        "boundPod": p.status.get("boundPod"),
        "targetUUIDs": p.status.get("targetUUIDs") or [],
        "allocatedDevices": p.status.get("allocatedDevices") or [],
        "claimedAt": p.status.get("claimedAt"),
        "consumedAt": p.status.get("consumedAt"),
        "resourceVersion": p.resource_version,
    }
