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
from hami_place_core.devices import default_kind
from hami_place_core.placement_status import Phase, PlacementStatus, is_mapping
from hami_place_core.problems import Code, Problem
from hami_place_core.requests import HAMI_RESOURCES, RES_CORES, RES_GPU, RES_MEM, RES_MEM_PCT
from hami_place_core.targets import TargetError, TargetSpec, parse_targets

# The vendor a pin is written for (NVIDIA today): its UUID selector; its resources as requests.py reads them.
_VENDOR = default_kind()
_USE_UUID = _VENDOR.use_uuid

GROUP = "scheduling.hami.placement.com"
VERSION = "v1"
PLURAL = "hamipodplacements"
KIND = "HamiPodPlacement"
API_VERSION = f"{GROUP}/{VERSION}"

# The phases, as plain names (Phase is a StrEnum: each equals its string).
PENDING, CLAIMED, BOUND, EVICTING, WAITING, SCALING_UP, SCALING_DOWN, COMPLETED, FAILED, CANCELLED = (
    Phase.PENDING,
    Phase.CLAIMED,
    Phase.BOUND,
    Phase.EVICTING,
    Phase.WAITING,
    Phase.SCALING_UP,
    Phase.SCALING_DOWN,
    Phase.COMPLETED,
    Phase.FAILED,
    Phase.CANCELLED,
)
TERMINAL = (COMPLETED, FAILED, CANCELLED)

# spec.strategy of a move: Evict (the default) evicts the pod and lets its controller recreate it;
# Surge adds a replica pinned to the target and removes the old pod once the new one is Ready;
# Auto surges where that is safe and evicts otherwise (docs/agent.md, "Zero-downtime moves").
EVICT, SURGE, AUTO = "Evict", "Surge", "Auto"
STRATEGIES = (EVICT, SURGE, AUTO)
# Removes a surge placement only after the replica count it raised is restored.
SURGE_FINALIZER = f"{GROUP}/surge"

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
    selector: dict[str, Any]  # {} when malformed: a selector that cannot be read selects nothing
    node: str
    gpu_devices: tuple[str, ...]
    targets: TargetSpec | None
    target_error: str | None
    evict_pod: str | None
    strategy: str  # spec.strategy: Evict, Surge or Auto (Evict when absent or malformed)
    phase: str  # the status's phase as written (Pending when absent), even one this version does not know
    status: PlacementStatus
    raw: dict[str, Any]
    problems: tuple[Problem, ...] = ()  # what is malformed in the object's shape (spec, metadata)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def claim(self) -> str | None:
        return self.status.claim

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Placement:
        """Never raises: a field of the wrong shape is read as absent and reported in `problems`."""
        meta = _mapping(obj.get("metadata"))
        spec = _mapping(obj.get("spec"))
        raw_status = obj.get("status")
        status = PlacementStatus.parse(raw_status)
        problems = shape_problems(obj)
        bad_selector = any(x.code == Code.BAD_SELECTOR for x in problems)
        devices = spec.get("gpuDevices") or []
        targets, error = None, None
        try:
            targets = parse_targets(devices)
        except TargetError as e:
            error = str(e)
        phase = raw_status.get("phase") if is_mapping(raw_status) else None
        selector = spec.get("podSelector")
        return cls(
            namespace=_text(meta.get("namespace")),
            name=_text(meta.get("name")),
            uid=_text(meta.get("uid")),
            resource_version=_text(meta.get("resourceVersion")),
            generation=meta["generation"] if _is_int(meta.get("generation")) else 0,
            req_id=_text(spec.get("reqID")),
            selector=dict(selector) if is_mapping(selector) and not bad_selector else {},
            node=_text(spec.get("nodeName")),
            gpu_devices=tuple(str(d) for d in devices) if isinstance(devices, list | tuple) else (),
            targets=targets,
            target_error=error,
            evict_pod=_text(spec.get("evictPod")) or None,
            strategy=spec["strategy"] if spec.get("strategy") in STRATEGIES else EVICT,
            phase=str(phase) if phase else PENDING,
            status=status,
            raw=dict(obj),
            problems=tuple(problems),
        )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if is_mapping(value) else {}


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object) -> str:
    return f"{type(value).__name__} {value!r:.60}"


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _selector_problems(selector: object) -> list[str]:
    """What makes `selector` not a LabelSelector of the CRD's shape; [] for a well-formed one."""
    if not is_mapping(selector):
        return [f"spec.podSelector must be an object with matchLabels or matchExpressions, got {_shown(selector)}"]
    out = []
    labels = selector.get("matchLabels")
    if labels is not None:
        if not is_mapping(labels):
            out.append(f"spec.podSelector.matchLabels must be an object of label: value, got {_shown(labels)}")
        else:
            out += [
                f"spec.podSelector.matchLabels[{k!r}] must be a string, got {_shown(v)}"
                for k, v in labels.items()
                if not isinstance(v, str)
            ]
    exprs = selector.get("matchExpressions")
    if exprs is not None and not isinstance(exprs, list):
        out.append(f"spec.podSelector.matchExpressions must be a list, got {_shown(exprs)}")
    for i, e in enumerate(exprs if isinstance(exprs, list) else ()):
        where = f"spec.podSelector.matchExpressions[{i}]"
        if not is_mapping(e):
            out.append(f"{where} must be an object with key and operator, got {_shown(e)}")
            continue
        key, op, values = e.get("key"), e.get("operator"), e.get("values")
        if not isinstance(key, str) or not key:
            out.append(f"{where}.key must be a non-empty string, got {_shown(key)}")
        if op not in _OPERATORS:
            out.append(f"{where}.operator must be one of {', '.join(_OPERATORS)}, got {_shown(op)}")
        if values is not None and not (isinstance(values, list) and all(isinstance(v, str) for v in values)):
            out.append(f"{where}.values must be a list of strings, got {_shown(values)}")
        elif op in ("In", "NotIn") and not values:
            out.append(f"{where} with operator {op} must have a non-empty values list")
        elif op in ("Exists", "DoesNotExist") and values:
            out.append(f"{where} with operator {op} must not have values")
    return out


def shape_problems(obj: Mapping[str, Any]) -> list[Problem]:
    """Fields whose type is not the CRD's (a crafted review can send anything); gpuDevices has its
    own precise messages (target_error). The API server's schema rejects all of these first, so a
    real request never carries them."""
    meta, spec = obj.get("metadata"), obj.get("spec")
    if meta is not None and not is_mapping(meta):
        return [Problem(Code.MALFORMED_SPEC, f"metadata must be an object, got {_shown(meta)}")]
    if spec is None:
        return []
    if not is_mapping(spec):
        return [Problem(Code.MALFORMED_SPEC, f"spec must be an object, got {_shown(spec)}")]
    out = [
        Problem(Code.MALFORMED_SPEC, f"spec.{key} must be a string, got {_shown(spec[key])}")
        for key in ("reqID", "nodeName", "evictPod")
        if key in spec and not isinstance(spec[key], str)
    ]
    if "strategy" in spec and spec["strategy"] not in STRATEGIES:
        out.append(
            Problem(
                Code.MALFORMED_SPEC,
                f"spec.strategy must be one of {', '.join(STRATEGIES)}, got {_shown(spec['strategy'])}",
            )
        )
    if "podSelector" in spec:
        out += [Problem(Code.BAD_SELECTOR, m) for m in _selector_problems(spec["podSelector"])]
    timeouts = spec.get("timeouts")
    if timeouts is not None and not is_mapping(timeouts):
        out.append(Problem(Code.MALFORMED_SPEC, f"spec.timeouts must be an object, got {_shown(timeouts)}"))
    for key, value in timeouts.items() if is_mapping(timeouts) else ():
        if key in ("evictionSeconds", "replacementSeconds") and not (_is_int(value) and value >= 1):
            out.append(
                Problem(Code.MALFORMED_SPEC, f"spec.timeouts.{key} must be a positive integer, got {_shown(value)}")
            )
    return out


def _strings(value: object) -> bool:
    return type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items())


def _objects(value: object) -> bool:
    return type(value) is list and all(type(x) is dict for x in value)


def pod_resource_problems(pod: Mapping[str, Any]) -> list[Problem]:
    """The types of what deciding whether HAMi schedules the pod reads (its containers' resource
    names): cheap enough for every pod review. Values are not looked at here."""
    spec = pod.get("spec") or {}
    if type(spec) is not dict:
        return [Problem(Code.MALFORMED_POD, f"spec must be an object, got {_shown(spec)}")]
    out = []
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if containers is None:
            continue
        if type(containers) is not list:
            out.append(f"spec.{key} must be a list of containers")
            continue
        for i, c in enumerate(containers):
            res = c.get("resources") if type(c) is dict else ()
            if res is None:
                continue
            if type(res) is dict:
                limits, requests = res.get("limits"), res.get("requests")
                if (limits is None or type(limits) is dict) and (requests is None or type(requests) is dict):
                    continue
            out.append(f"spec.{key}[{i}] must be a container with resources.limits and .requests objects")
    return _pod_problems(out)


def pod_shape_problems(pod: Mapping[str, Any]) -> list[Problem]:
    """What in a pod has a type the API server would never send (only a crafted review can): all
    the mutating webhook reads before pinning it (labels, annotations, owners, resources, node
    affinity); [] for every pod the API server sends."""
    problems = pod_resource_problems(pod)
    if problems:
        return problems
    out: list[str] = []
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    for key in ("labels", "annotations"):
        if meta.get(key) is not None and not _strings(meta[key]):
            out.append(f"metadata.{key} must be an object of strings")
    if meta.get("ownerReferences") is not None and not _objects(meta["ownerReferences"]):
        out.append("metadata.ownerReferences must be a list of objects")
    for key in ("containers", "initContainers"):
        for i, c in enumerate(spec.get(key) or ()):
            res = c.get("resources") or {}
            if not all(_strings(res.get(part) or {}) for part in ("limits", "requests")):
                out.append(f"spec.{key}[{i}].resources must hold quantities as strings")
    affinity = spec.get("affinity")
    if affinity is not None and not _node_affinity_ok(affinity):
        out.append("spec.affinity.nodeAffinity must be a NodeAffinity object")
    return _pod_problems(out)


def _node_affinity_ok(affinity: object) -> bool:
    if type(affinity) is not dict:
        return False
    node = affinity.get("nodeAffinity")
    if node is None:
        return True
    if type(node) is not dict:
        return False
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    if type(required) is not dict:
        return False
    terms = required.get("nodeSelectorTerms")
    return terms is None or (
        _objects(terms) and all(t.get("matchFields") is None or type(t["matchFields"]) is list for t in terms)
    )


def _pod_problems(messages: list[str]) -> list[Problem]:
    return [Problem(Code.MALFORMED_POD, m) for m in messages]


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
    wanted = {_USE_UUID: ann.join_list(uuids), **link}
    # Only on the first pin (no link annotation yet), so a reinvocation changes nothing.
    if annotations and _USE_UUID in annotations and not any(k in annotations for k in link):
        wanted[POD_ORIGINAL_USE_GPU_UUID] = annotations[_USE_UUID]
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


_REQ_ID = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


def req_id_problem(value: str) -> str:
    """Why `value` cannot be a reqID (the CRD's length and pattern), or "" if it can."""
    if not 5 <= len(value) <= 63:
        return f"{value!r} has {len(value)} characters; a reqID has 5 to 63"
    if not _REQ_ID.match(value):
        return f"{value!r}: a reqID has letters, digits, '-', '_' and '.', and starts and ends with a letter or digit"
    return ""


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
    strategy: str = EVICT,
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
        if strategy != EVICT:
            spec["strategy"] = strategy
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {CREATED_BY_LABEL: created_by}},
        "spec": spec,
    }


# Where a pod's controlling owner is read (its spec.selector is what a replacement carries).
OWNER_PATHS = {
    "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets/{name}",
    "StatefulSet": "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}",
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
    "DaemonSet": "/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
    "Job": "/apis/batch/v1/namespaces/{ns}/jobs/{name}",
}


def owner_path(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, API path) of the pod's controlling owner, or None (standalone, or a kind not read)."""
    meta = pod.get("metadata") or {}
    ref = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    if ref is None or ref.get("kind") not in OWNER_PATHS:
        return None
    return str(ref["kind"]), OWNER_PATHS[ref["kind"]].format(ns=meta.get("namespace", ""), name=ref.get("name", ""))


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
        "strategy": p.status.strategy or p.strategy,
        "phase": p.phase,
        "reason": p.status.reason,
        "message": p.status.message,
        "boundPod": p.status.bound_pod,
        "targetUUIDs": list(p.status.target_uuids or ()),
        "allocatedDevices": list(p.status.allocated_devices or ()),
        "claimedAt": p.status.claimed_at,
        "consumedAt": p.status.consumed_at,
        "resourceVersion": p.resource_version,
    }
