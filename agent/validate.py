"""The validating webhook for HamiPodPlacement: reject a bad target before anything happens.

Checks, each with a precise message: node and GPU indices exist; the GPUs are healthy and not
cordoned; the request of the pods the selector matches fits HAMi's Fit rules on the target GPUs;
the reqID is unused in the namespace; the spec does not change once claimed; evictPod exists, has
a controller that recreates it and matches the selector; and the requesting user may create
pods/eviction (SubjectAccessReview): nobody evicts through the agent what they could not evict
themselves.
"""

from __future__ import annotations

import logging
from typing import Any

from agent import metrics
from agent.admission import Review, Verdict
from agent.cache import ClusterCache
from agent.config import Settings
from agent.kube import AsyncKube
from hami_place_core import placement as hp
from hami_place_core import surge
from hami_place_core.annotations import GpuDevice
from hami_place_core.fit import GpuUsage, fit_pod
from hami_place_core.kube import errors as kube_errors
from hami_place_core.node_resources import pod_requests
from hami_place_core.placement import Placement
from hami_place_core.planning.constraints import scheduling_refusal, tolerates
from hami_place_core.problems import Code, Problem, has_code, messages
from hami_place_core.requests import DeviceSelectors, GpuRequest, PodRequest, pod_request
from hami_place_core.selectors import SelectorError, matches
from hami_place_core.state import NodeState, PodAllocation, pod_allocation
from hami_place_core.targets import TargetError, TargetSpec, resolve

log = logging.getLogger("hami_place.agent.validate")

# Jobs are refused: an evicted Job pod restarts its work from the beginning, which is a rerun,
# not a move. Documented in docs/agent.md.
RECREATING_OWNERS = ("ReplicaSet", "StatefulSet", "ReplicationController")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def _deny(message: str) -> Verdict:
    return Verdict(allowed=False, code=422, reason="Invalid", message=message)


def _deny_problems(problems: list[Problem]) -> Verdict:
    return _deny("; ".join(messages(problems)))


def target_request(base: PodRequest | None, targets: TargetSpec) -> PodRequest:
    """What the pinned pod will ask for: the pod's own request, with the placement's count (and /P)."""
    n = len(targets.entries)
    if base is None or not base.gpu_containers:
        if targets.percent is not None:
            req = GpuRequest(nums=n, mem_percentage=targets.percent, coresreq=targets.percent)
        else:
            req = GpuRequest(nums=n, mem_percentage=100, coresreq=100)
        return PodRequest(init=(), containers=(req,))
    containers: list[GpuRequest | None] = []
    for r in base.containers:
        if r is None:
            containers.append(None)
        elif targets.percent is not None:
            containers.append(GpuRequest(nums=n, mem_percentage=targets.percent, coresreq=targets.percent))
        else:
            containers.append(GpuRequest(nums=n, memreq=r.memreq, mem_percentage=r.mem_percentage, coresreq=r.coresreq))
    # The pin replaces nvidia.com/use-gpuuuid, so a pod already pinned elsewhere (being moved again)
    # is judged without its old one; nouse- and the type selectors stay.
    selectors = DeviceSelectors(
        nouse_uuids=base.selectors.nouse_uuids,
        use_types=base.selectors.use_types,
        nouse_types=base.selectors.nouse_types,
    )
    return PodRequest(init=(), containers=tuple(containers), selectors=selectors)


class PlacementValidator:
    def __init__(self, settings: Settings, cache: ClusterCache, kube: AsyncKube) -> None:
        self.settings = settings
        self.cache = cache
        self.kube = kube

    async def review(self, review: Review) -> Verdict:
        try:
            return await self._review(review)
        except Exception as e:
            metrics.ERRORS.labels(kind="validate").inc()
            log.exception("validating webhook failed for %s/%s", review.namespace, review.name)
            return Verdict(allowed=False, code=500, message=f"hami-place could not validate the placement: {e}")

    async def _review(self, review: Review) -> Verdict:
        if review.operation not in ("CREATE", "UPDATE") or review.kind.get("kind") not in (hp.KIND, None):
            return Verdict()
        p = Placement.from_object(review.obj)
        if review.operation == "UPDATE" and review.old is not None:
            old = Placement.from_object(review.old)
            if (review.obj.get("spec") or {}) == (review.old.get("spec") or {}):
                return Verdict()  # metadata-only update
            if old.phase != hp.PENDING:
                return _deny(
                    f"placement {p.name} was already claimed (phase {old.phase}); its spec can no longer change. "
                    f"Delete it and create a new one with a new reqID"
                )
        if p.problems:
            # A shape the CRD's schema forbids (only a crafted review carries one): nothing below
            # may read it, so deny with what is wrong, gpuDevices included.
            shown = [*p.problems, *([Problem(Code.BAD_GPU_DEVICES, p.target_error)] if p.target_error else [])]
            return _deny_problems(shown)
        if not self.settings.validation_enabled:
            return Verdict(warnings=["hami-place: placement validation is disabled on this agent"])
        if not self.cache.ready:
            return Verdict(
                allowed=False, code=503, message="hami-place agent is still syncing its cache; retry shortly"
            )
        problems: list[Problem] = []
        warnings: list[str] = []
        if p.target_error:
            # The placement's own shape: said first, and the node is not looked at at all.
            problems.append(Problem(Code.BAD_GPU_DEVICES, p.target_error))
        else:
            refused = await self._may_read_node(review, p.node)
            if refused:
                return Verdict(allowed=False, code=403, reason="Forbidden", message=refused)
        for other in self.cache.placements_in(p.namespace):
            if other.name != p.name and other.req_id == p.req_id:
                problems.append(
                    Problem(
                        Code.REQ_ID_TAKEN,
                        f"reqID {p.req_id!r} is already used by placement {other.name} in namespace {p.namespace}",
                    )
                )
        if not p.target_error:
            problems += check_target(self.cache, p, warnings)
        if p.evict_pod:
            problems += await self._move_problems(review, p, problems)
        if problems:
            return _deny_problems(problems)
        return Verdict(warnings=warnings)

    async def _may_read_node(self, review: Review, node: str) -> str:
        """Forbidden before NotFound, as the API server answers: whether the node exists, its GPU
        indices and their room are told only to a requester who may read that node (get it, or
        list nodes); anyone else gets this one answer, whatever the node (docs/security.md)."""
        for verb, name in (("get", node), ("list", "")):
            allowed, why = await may(review.user, self.kube, "", verb, "", "nodes", name)
            if allowed:
                return ""
        return (
            f"user {review.username or '<unknown>'} may not get node {node}{': ' + why if why else ''}; a placement "
            "targets a node's GPUs, so its author must be allowed to read that node"
        )

    async def _move_problems(self, review: Review, p: Placement, earlier: list[Problem]) -> list[Problem]:
        """evictPod's checks, and that the requester may do what the move does."""
        found: list[Problem] = []
        found += check_evict_pod(self.cache, p)
        if not has_code(found, Code.EVICT_POD_NOT_FOUND):
            allowed, why = await self._may_evict(review, p.namespace, p.evict_pod or "")
            if not allowed:
                found.append(
                    Problem(
                        Code.EVICTION_NOT_ALLOWED,
                        f"user {review.username or '<unknown>'} may not create pods/eviction in namespace "
                        f"{p.namespace}{': ' + why if why else ''}; hami-place evicts only what the requester "
                        "could evict",
                    )
                )
        if p.strategy != hp.EVICT and not earlier and not found:
            found += await self._surge_problems(review, p)
        return found

    async def _surge_problems(self, review: Review, p: Placement) -> list[Problem]:
        """A surge scales the pod's controller: the requester must be allowed to (SubjectAccessReview
        on its scale subresource; the agent's own policies too), and Surge (not Auto) needs room
        next to the running pod."""
        pod = self.cache.pod(p.namespace, p.evict_pod)
        kind, name = surge_owner(pod) if pod else (None, None)
        if kind is not None and p.strategy != hp.AUTO:
            room = check_target(self.cache, p, [], keep_mover=True)
            if room:
                return [
                    Problem(
                        Code.NO_GPU_ROOM,
                        f"strategy Surge: the added replica has no room on the target while {p.evict_pod} still runs: "
                        + "; ".join(messages(room)),
                    )
                ]
        if kind is None:
            return []  # not a ReplicaSet's pod: Surge is refused at start with the reason, Auto evicts
        try:
            rs = await self.kube.request("GET", f"/apis/apps/v1/namespaces/{p.namespace}/replicasets/{name}")
        except kube_errors.KubeError as e:
            return [
                Problem(Code.EVICT_POD_OWNER_UNSUPPORTED, f"strategy {p.strategy}: cannot read ReplicaSet {name}: {e}")
            ]
        owner = surge.controller_of(rs)
        plural, target = (
            ("deployments", owner.get("name")) if owner and owner.get("kind") == "Deployment" else ("replicasets", name)
        )
        # `patch`, the verb the agent itself uses on the scale subresource (agent/surge.py): what the
        # agent does for the requester, the requester must be allowed to do.
        allowed, why = await may(review.user, self.kube, p.namespace, "patch", "apps", f"{plural}/scale", str(target))
        if allowed:
            return []
        return [
            Problem(
                Code.EVICTION_NOT_ALLOWED,
                f"user {review.username or '<unknown>'} may not patch {plural}/scale {target} in namespace "
                f"{p.namespace}{': ' + why if why else ''}; strategy {p.strategy} scales it",
            )
        ]

    async def _may_evict(self, review: Review, namespace: str, pod: str) -> tuple[bool, str]:
        return await may_evict(self.kube, review.user, namespace, pod)


async def may_evict(kube: AsyncKube, user: dict[str, Any], namespace: str, pod: str = "") -> tuple[bool, str]:
    """Whether the requesting user may create pods/eviction for `pod` in `namespace` (any pod when
    `pod` is empty; every namespace when `namespace` is empty), and the authorizer's reason: nobody
    evicts through the agent what they could not evict themselves."""
    return await may(user, kube, namespace, "create", "", "pods/eviction", pod)


async def may(
    user: dict[str, Any], kube: AsyncKube, namespace: str, verb: str, group: str, resource: str, name: str = ""
) -> tuple[bool, str]:
    """Whether `user` may `verb` `resource` (with "/subresource") in `namespace`, and the reason."""
    groups, extra = user.get("groups"), user.get("extra")
    plural, _, subresource = resource.partition("/")
    attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": plural}
    if subresource:
        attributes["subresource"] = subresource
    if name:
        attributes["name"] = name
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            # The API server sends userInfo in this shape; anything else (a crafted review) is
            # dropped rather than passed on, so the answer is a denial, not a failed request.
            "user": _str_or_none(user.get("username")),
            "groups": [g for g in groups if isinstance(g, str)] if isinstance(groups, list) else [],
            "uid": _str_or_none(user.get("uid")),
            "extra": {
                k: [v for v in vs if isinstance(v, str)]
                for k, vs in (extra.items() if isinstance(extra, dict) else ())
                if isinstance(vs, list)
            },
            "resourceAttributes": attributes,
        },
    }
    try:
        result = await kube.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", body=body)
    except kube_errors.KubeError as e:
        # Not answerable (the agent may not create SubjectAccessReviews, the API server is away):
        # a denial that says so, never an allowance and never a 500.
        return False, f"the agent could not ask the API server ({e})"
    status = result.get("status") or {}
    return bool(status.get("allowed")), str(status.get("reason") or "")


def surge_owner(pod: dict[str, Any]) -> tuple[str | None, str | None]:
    """("ReplicaSet", name) for a ReplicaSet's pod, else (None, None)."""
    owner = surge.owner_kind(pod)
    return owner if owner and owner[0] == "ReplicaSet" else (None, None)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


# ---- checks shared with the mover, which re-runs them at execution time ----------------------------
def matching_pods(cache: ClusterCache, p: Placement) -> list[dict[str, Any]]:
    out = []
    for pod in cache.pods_in(p.namespace):
        meta = pod.get("metadata") or {}
        if meta.get("namespace") != p.namespace or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        try:
            if matches(p.selector, meta.get("labels")):
                out.append(pod)
        except SelectorError:
            return []
    return out


def check_target(cache: ClusterCache, p: Placement, warnings: list[str], keep_mover: bool = False) -> list[Problem]:
    """The node, the GPUs and room for the request; [] when the target is valid. With
    `keep_mover` (a surge) the pod being moved keeps its GPUs and node room while the new one starts."""
    node = cache.node_state(p.node)
    if node is None:
        return [Problem(Code.NODE_NOT_FOUND, f"node {p.node} not found")]
    if p.targets is None:
        return []
    targets = p.targets
    matched = matching_pods(cache, p)
    mover = cache.pod(p.namespace, p.evict_pod)
    sample = mover or (matched[0] if matched else None)
    if node.unschedulable and not _tolerates_cordon(sample):
        # kube-scheduler's NodeUnschedulable filter: the pinned pod would stay Pending (and a
        # move would have evicted its pod for nothing).
        return [
            Problem(
                Code.NODE_UNSCHEDULABLE,
                f"node {node.name} is cordoned (spec.unschedulable): no new pod is scheduled there; "
                f"run kubectl uncordon {node.name} first",
            )
        ]
    # Decoded once: the pod's scheduling constraints here, the mover's own usage below.
    sample_alloc = pod_allocation(sample) if sample else None
    refusal = _node_constraints(sample_alloc, node)
    if refusal:
        return [refusal]
    try:
        gpus = resolve(targets, node)
    except TargetError as e:
        return [Problem(Code.TARGET_UNRESOLVED, str(e))]
    problems = _gpu_problems(node, gpus)
    if problems:
        return problems
    # The usage of the pod being moved does not count against its own target.
    usage = {g.uuid: (node.usage.get(g.uuid) or GpuUsage()).copy() for g in gpus}
    alloc = sample_alloc if mover else None  # the sample is the mover when there is one
    if alloc and alloc.node == node.name and not keep_mover:
        for uuid, (slots, mem, cores) in alloc.per_gpu.items():
            if uuid in usage:
                usage[uuid].used -= slots
                usage[uuid].usedmem -= mem
                usage[uuid].usedcores -= cores
    base = pod_request(sample, webhook=True) if sample else None
    if base is None:
        warnings.append(
            "hami-place: no pod matches podSelector yet; capacity was checked for "
            + (f"a {targets.percent}% share" if targets.percent is not None else "whole GPUs")
        )
    request = target_request(base, targets)
    result = fit_pod(request, gpus, usage, node.cordoned, exact=True)
    if not result.ok:
        names = {g.uuid: f"gpu-{g.index}" for g in gpus}
        message = f"the target GPUs on node {node.name} have no room for the request: {result.message(names)}"
        return [Problem(Code.NO_GPU_ROOM, message)]
    # kube-scheduler's NodeResourcesFit: without CPU, memory or a pod slot on the node the pinned
    # pod would stay Pending. A pod already on the target node gives its own room back.
    room = cache.state.free_resources(node.name)
    gives_back = (sample or {}).get("spec", {}).get("nodeName") == node.name and not keep_mover
    if sample is not None and room is not None and not gives_back:
        short = room.shortfall(pod_requests(sample))
        if short is not None:
            return [Problem(Code.NO_NODE_ROOM, f"node {node.name} has no room for the pod: {short}")]
    return []


def check_evict_pod(cache: ClusterCache, p: Placement) -> list[Problem]:
    """evictPod exists, a controller recreates it, and its replacement will match the selector."""
    pod = cache.pod(p.namespace, p.evict_pod)
    if pod is None:
        return [Problem(Code.EVICT_POD_NOT_FOUND, f"evictPod {p.evict_pod} not found in namespace {p.namespace}")]
    meta = pod.get("metadata") or {}
    problems = []
    if meta.get("annotations", {}).get(MIRROR_ANNOTATION):
        return [
            Problem(
                Code.EVICT_POD_MIRROR,
                f"evictPod {p.evict_pod} is a static (mirror) pod: only its node's kubelet can move it",
            )
        ]
    owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    if owner is None:
        problems.append(
            Problem(
                Code.EVICT_POD_NO_CONTROLLER,
                f"evictPod {p.evict_pod} has no controller owner: nothing would recreate it after eviction",
            )
        )
    elif owner.get("kind") == "DaemonSet":
        problems.append(
            Problem(
                Code.EVICT_POD_DAEMONSET,
                f"evictPod {p.evict_pod} belongs to DaemonSet {owner.get('name')}, which runs one pod per node",
            )
        )
    elif owner.get("kind") not in RECREATING_OWNERS:
        problems.append(
            Problem(
                Code.EVICT_POD_OWNER_UNSUPPORTED,
                f"evictPod {p.evict_pod} is owned by a {owner.get('kind')}, which hami-place does not move",
            )
        )
    try:
        if not matches(p.selector, meta.get("labels")):
            problems.append(
                Problem(
                    Code.EVICT_POD_NOT_SELECTED,
                    f"evictPod {p.evict_pod} does not match podSelector: its replacement would never claim this "
                    "placement",
                )
            )
    except SelectorError as e:
        problems.append(Problem(Code.BAD_SELECTOR, str(e)))
    return problems


def _node_constraints(alloc: PodAllocation | None, node: NodeState) -> Problem | None:
    """kube-scheduler's NodeAffinity and TaintToleration filters for the pod (the one moved, or one
    the selector matches) on the target: the pinned pod ANDs the pin into its own constraints, so a
    node they exclude would leave it Pending (and a move would have evicted its pod for nothing)."""
    why = scheduling_refusal(alloc, node) if alloc else None
    if alloc is None or why is None:
        return None
    return Problem(Code.NODE_CONSTRAINTS, f"pod {alloc.namespace}/{alloc.name} cannot run on node {node.name}: {why}")


_CORDON_TAINT = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


def _tolerates_cordon(pod: dict[str, Any] | None) -> bool:
    """Whether the pod (the one moved, or one the selector matches) tolerates a cordoned node, as
    DaemonSet pods do; without a pod to look at, it does not."""
    tolerations = ((pod or {}).get("spec") or {}).get("tolerations") or ()
    return any(isinstance(t, dict) and tolerates(t, _CORDON_TAINT) for t in tolerations)


def _gpu_problems(node: NodeState, gpus: tuple[GpuDevice, ...]) -> list[Problem]:
    problems = []
    for g in gpus:
        if not g.health:
            problems.append(Problem(Code.GPU_UNHEALTHY, f"gpu-{g.index} ({g.uuid}) on node {node.name} is unhealthy"))
        elif g.uuid in node.cordoned:
            problems.append(
                Problem(
                    Code.GPU_CORDONED,
                    f"gpu-{g.index} ({g.uuid}) on node {node.name} is cordoned (hami.io/device-cordon)",
                )
            )
    return problems
