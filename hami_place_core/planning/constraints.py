"""Which nodes kube-scheduler would let a pod's replacement onto, and which pods may be moved at all.

HAMi runs as a scheduler extender behind kube-scheduler (``nodeCacheCapable``): kube-scheduler's
own filters run first, so a move is only valid if the replacement pod passes them on the target
node. Modelled here, with Kubernetes' semantics (``k8s.io/component-helpers/scheduling/corev1``
and the NodeAffinity, TaintToleration and NodeUnschedulable plugins):

- ``spec.nodeSelector``: every label must match;
- required node affinity: ``nodeSelectorTerms`` are ORed, each term ANDs its ``matchExpressions``
  (labels; In, NotIn, Exists, DoesNotExist, Gt, Lt) and ``matchFields`` (``metadata.name``);
  a term with neither matches no node;
- taints with effect NoSchedule or NoExecute must be tolerated (PreferNoSchedule only scores);
- the node is Ready, not cordoned (``spec.unschedulable``) and HAMi can read its GPU inventory.

Not modelled, so handled conservatively: required inter-pod (anti-)affinity (a pod that has it
only moves between GPUs of its own node, where every topology domain stays the same), topology
spread constraints and volumes (not in the state), and CPU/memory requests (the state holds only
GPU pods, so a node's CPU and memory use is unknown; a move can leave the replacement Pending on
a node short of CPU, which the agent then reports as a replacement timeout).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.placement import POD_NODE, POD_ORIGINAL_USE_GPU_UUID, POD_PLACEMENT
from hami_place_core.state import ClusterState, NodeState, PodAllocation

# Controllers that recreate an evicted pod. Jobs are not moved: an evicted Job pod reruns its work
# from the start (a rerun, not a move), as agent/validate.py refuses them; DaemonSets run one pod
# per node; a bare or static pod would not come back.
MOVABLE_OWNERS = ("ReplicaSet", "StatefulSet", "ReplicationController")
DEFAULT_EXCLUDED_NAMESPACES = ("kube-system",)
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """corev1 ``Toleration.ToleratesTaint``."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    if operator == "Equal":
        return key == (taint.get("key") or "") and (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated_taint(tolerations: Sequence[Mapping[str, Any]], taints: Sequence[Mapping[str, Any]]) -> str | None:
    """The first NoSchedule/NoExecute taint no toleration covers, as ``key=value:effect``; None if all are."""
    for t in taints:
        if t.get("effect") not in SCHEDULING_EFFECTS:
            continue
        if not any(tolerates(tol, t) for tol in tolerations):
            value = t.get("value")
            return f"{t.get('key')}{'=' + str(value) if value else ''}:{t.get('effect')}"
    return None


def _requirement(req: Mapping[str, Any], value: str | None, present: bool) -> bool:
    op = req.get("operator")
    values = [str(v) for v in req.get("values") or ()]
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(str(value)), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False  # an unknown operator matches nothing (the API server rejects it anyway)


def term_matches(term: Mapping[str, Any], node_name: str, labels: Mapping[str, str]) -> bool:
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    for e in exprs:
        key = str(e.get("key"))
        if not _requirement(e, labels.get(key), key in labels):
            return False
    return all(f.get("key") == "metadata.name" and _requirement(f, node_name, True) for f in fields)


def required_terms(affinity: Mapping[str, Any]) -> Sequence[Mapping[str, Any]] | None:
    node_aff = affinity.get("nodeAffinity") or {}
    required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms")
    return terms if terms else None


def has_required_pod_affinity(affinity: Mapping[str, Any]) -> bool:
    """Required inter-pod affinity or anti-affinity: kept on its node by the planner."""
    return any(
        (affinity.get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        for kind in ("podAffinity", "podAntiAffinity")
    )


def node_schedulable(node: NodeState) -> bool:
    return node.ready and not node.unschedulable and node.parseable and bool(node.devices)


def node_refusal(pod: PodAllocation, node: NodeState) -> str | None:
    """Why kube-scheduler (or HAMi's node filter) would keep the pod's replacement off `node`; None if not."""
    if not node.ready:
        return "node is not Ready"
    if node.unschedulable:
        return "node is cordoned"
    if not node.parseable or not node.devices:
        return "node has no readable HAMi GPU inventory"
    why = _filters(pod, node)
    if why is not None:
        return why
    if node.name != pod.node and has_required_pod_affinity(pod.affinity):
        return "the pod has required inter-pod (anti-)affinity, so it only moves within its node"
    return None


def _filters(pod: PodAllocation, node: NodeState) -> str | None:
    """kube-scheduler's NodeAffinity (nodeSelector, required node affinity) and TaintToleration filters."""
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return f"nodeSelector {k}={v} does not match"
    terms = required_terms(pod.affinity)
    if terms is not None and not any(term_matches(t, node.name, node.labels) for t in terms):
        return "required node affinity does not match"
    taint = untolerated_taint(pod.tolerations, node.taints)
    if taint is not None:
        return f"taint {taint} is not tolerated"
    return None


def scheduling_refusal(pod: PodAllocation, node: NodeState) -> str | None:
    """Why kube-scheduler would keep the pod's replacement (its controller's template: without an
    earlier placement's pin) off `node` by its labels and taints; None if it would not. The
    readiness and cordon checks are the caller's (a pod may tolerate a cordon)."""
    return _filters(as_replacement(pod), node)


def constraint_signature(pod: PodAllocation) -> str:
    """A string equal for pods that kube-scheduler's filters treat alike (for caching node checks)."""
    if not pod.node_selector and not pod.affinity and not pod.tolerations:
        return ""
    import json

    pinned = pod.node if has_required_pod_affinity(pod.affinity) else ""
    return json.dumps(
        [pod.node_selector, pod.affinity, list(pod.tolerations), pinned], sort_keys=True, separators=(",", ":")
    )


def immovable_reason(
    pod: PodAllocation, excluded_namespaces: frozenset[str] | set[str], problems: Mapping[str, str]
) -> str | None:
    """Why the planner must leave this pod where it is; None if it may be moved."""
    if pod.namespace in excluded_namespaces:
        return f"namespace {pod.namespace} is excluded"
    if str(pod.annotations.get(ann.POD_DEFRAG, "")).strip().lower() == "false":
        return f"opted out ({ann.POD_DEFRAG}: false)"
    if pod.owner_kind is None:
        return "no controller would recreate it (bare pod)"
    if pod.owner_kind not in MOVABLE_OWNERS:
        return f"owned by a {pod.owner_kind}, which is not moved"
    if pod.terminating:
        return "terminating"
    if pod.phase != "Running":
        return f"phase {pod.phase}, not Running"
    if pod.key in problems:
        return f"its HAMi allocation is unreadable: {problems[pod.key]}"
    gpu = pod.request.gpu_containers
    if len(gpu) != 1 or any(r is not None for r in pod.request.init):
        # A pin gives every GPU container all the target GPUs (nvidia.com/gpu = the target count),
        # so only one GPU container keeps its request unchanged through a move.
        return "more than one container (or an init container) uses GPUs"
    if len(pod.per_gpu) != gpu[0].nums or any(slots != 1 for slots, _, _ in pod.per_gpu.values()):
        return "its allocation does not match its request"
    return None


# ---- a pod as its controller will recreate it -------------------------------------------------------
def _pin_term(node: str) -> dict[str, Any]:
    # the exact expression hami_place_core.placement.pin_patch ANDs into every term
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def _without_pin(affinity: Mapping[str, Any], node: str) -> Mapping[str, Any]:
    terms = required_terms(affinity)
    pin = _pin_term(node)
    if terms is None or not any(pin in (t.get("matchFields") or ()) for t in terms):
        return affinity
    kept = []
    for t in terms:
        fields = [f for f in t.get("matchFields") or () if f != pin]
        term = {k: v for k, v in t.items() if k != "matchFields"}
        if fields:
            term["matchFields"] = fields
        if term.get("matchExpressions") or term.get("matchFields"):
            kept.append(term)  # a term left empty was the pin's own (an empty term matches no node)
    node_aff = dict(affinity.get("nodeAffinity") or {})
    required = dict(node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    if kept:
        required["nodeSelectorTerms"] = kept
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = required
    else:
        node_aff.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
    out = {k: v for k, v in affinity.items() if k != "nodeAffinity"}
    if node_aff:
        out["nodeAffinity"] = node_aff
    return out


def as_replacement(pod: PodAllocation) -> PodAllocation:
    """The pod as its controller's template makes it again: without a placement's pin.

    A pod that a HamiPodPlacement pinned carries the pin (required affinity to the node, and
    ``nvidia.com/use-gpuuuid``) only on itself; its replacement is built from the template and gets
    whatever new pin the next placement gives it. Planning with the pin would keep every pod that
    hami-place ever moved where it is. The pod's own earlier use-gpuuuid, if it had one, is restored
    from the annotation pin_patch keeps (POD_ORIGINAL_USE_GPU_UUID).
    """
    node = pod.annotations.get(POD_NODE)
    if not node or POD_PLACEMENT not in pod.annotations:
        return pod
    original = ann.split_list(pod.annotations.get(POD_ORIGINAL_USE_GPU_UUID))
    selectors = dataclasses.replace(pod.request.selectors, use_uuids=original)
    return dataclasses.replace(
        pod,
        affinity=_without_pin(pod.affinity, node),
        request=dataclasses.replace(pod.request, selectors=selectors),
    )


def replacement_state(state: ClusterState) -> ClusterState:
    """`state` with every pinned pod seen as its replacement (a shallow copy; `state` is untouched)."""
    changed = {k: r for k, a in state.pods.items() if (r := as_replacement(a)) is not a}
    return dataclasses.replace(state, pods={**state.pods, **changed}) if changed else state
