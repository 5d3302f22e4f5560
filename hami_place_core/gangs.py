"""Gangs: pods that start together or not at all, and how many of them must fit at once.

A pod says which group it belongs to in one of several ways; each is read here, once, in this
order (the first that a pod carries wins):

* **Kubernetes' own PodGroup** (1.36, feature gate ``GenericWorkload``):
  ``spec.schedulingGroup.podGroupName`` names a ``scheduling.k8s.io/v1alpha2`` PodGroup in the
  pod's namespace; its ``spec.schedulingPolicy.gang.minCount`` is the gang's size (k8s.io/api
  ``core/v1/types.go`` PodSchedulingGroup, ``scheduling/v1alpha2/types.go``). Kubernetes 1.35's
  ``spec.workloadRef`` (a Workload's pod group, optionally split by ``podGroupReplicaKey``) is
  read too: 1.36 replaced it, but a 1.35 cluster's pods still carry it.
* **scheduler-plugins' Coscheduling**: the label ``scheduling.x-k8s.io/pod-group`` names a
  ``scheduling.x-k8s.io/v1alpha1`` PodGroup whose ``spec.minMember`` is the size. HAMi itself
  treats a pod with that label, or with ``spec.schedulingGroup.podGroupName``, as a group member
  (HAMi ``pkg/util/types.go`` PodGroupLabel, ``pkg/util/util.go`` IsPodGroupMember: its Bind
  retries the node lock for them, ``pkg/scheduler/scheduler.go``).
* **Volcano**: the annotation ``scheduling.k8s.io/group-name`` names a
  ``scheduling.volcano.sh/v1beta1`` PodGroup (``spec.minMember``).
* **Kueue's pod groups** (plain pods): the label ``kueue.x-k8s.io/pod-group-name`` and the
  annotation ``kueue.x-k8s.io/pod-group-total-count``.
* **A workload that runs its pods together**: a JobSet (label ``jobset.sigs.k8s.io/jobset-name``),
  one group of a LeaderWorkerSet (``leaderworkerset.sigs.k8s.io/name`` and ``.../group-index``), an
  indexed Job (its controller reference; size: ``spec.parallelism``). A Kueue-admitted Job is one
  of these: Kueue admits the Job's pods as one Workload, and the Job is what runs them.

Without the group object (not readable, or not created yet) the size is the number of members
seen, and the answer says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NATIVE, WORKLOAD, COSCHEDULING, VOLCANO, KUEUE, JOBSET, LWS, JOB = (
    "PodGroup",
    "Workload",
    "scheduler-plugins PodGroup",
    "Volcano PodGroup",
    "Kueue pod group",
    "JobSet",
    "LeaderWorkerSet group",
    "Job",
)
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"  # HAMi pkg/util/types.go PodGroupLabel
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION = "kueue.x-k8s.io/pod-group-total-count"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
LWS_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/group-index"

# The names a user types in `plan --for KIND/NAME`, and the memberships each may mean.
KIND_NAMES: dict[str, tuple[str, ...]] = {
    "podgroup": (NATIVE, COSCHEDULING, VOLCANO, KUEUE),
    "pg": (NATIVE, COSCHEDULING, VOLCANO, KUEUE),
    "workload": (WORKLOAD,),
    "jobset": (JOBSET,),
    "leaderworkerset": (LWS,),
    "lws": (LWS,),
    "job": (JOB,),
}


class GangError(ValueError):
    """A group that cannot be read or found, in words that say what to do."""


@dataclass(frozen=True, order=True)
class GangRef:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Gang:
    ref: GangRef
    min_count: int  # members that must fit at once
    members: tuple[Mapping[str, Any], ...]  # the pods seen, in name order
    size_from: str  # where min_count comes from: "spec.minMember of ...", "members seen"

    @property
    def waiting(self) -> tuple[Mapping[str, Any], ...]:
        """Members not bound to a node yet (the ones to make room for), in name order."""
        return tuple(p for p in self.members if not (p.get("spec") or {}).get("nodeName") and not _done(p))

    @property
    def running(self) -> int:
        return sum(1 for p in self.members if (p.get("spec") or {}).get("nodeName") and not _done(p))


def _done(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def gang_of(pod: Mapping[str, Any]) -> GangRef | None:
    """The group `pod` belongs to, read in the module's order; None for a pod of its own."""
    meta, spec = _meta(pod), pod.get("spec") or {}
    ns = str(meta.get("namespace") or "")
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    native = (spec.get("schedulingGroup") or {}).get("podGroupName")
    if native:
        return GangRef(NATIVE, ns, str(native))
    ref = spec.get("workloadRef") or {}
    if ref.get("name") and ref.get("podGroup"):
        replica = f"/{ref['podGroupReplicaKey']}" if ref.get("podGroupReplicaKey") else ""
        return GangRef(WORKLOAD, ns, f"{ref['name']}/{ref['podGroup']}{replica}")
    for kind, value in (
        (COSCHEDULING, labels.get(COSCHEDULING_LABEL)),
        (VOLCANO, annotations.get(VOLCANO_ANNOTATION)),
        (KUEUE, labels.get(KUEUE_GROUP_LABEL)),
        (JOBSET, labels.get(JOBSET_LABEL)),
    ):
        if value:
            return GangRef(kind, ns, str(value))
    if labels.get(LWS_LABEL) and labels.get(LWS_GROUP_LABEL) is not None:
        return GangRef(LWS, ns, f"{labels[LWS_LABEL]}/{labels[LWS_GROUP_LABEL]}")
    owner = next((o for o in meta.get("ownerReferences") or () if o.get("controller")), None)
    if owner is not None and owner.get("kind") == "Job" and owner.get("name"):
        return GangRef(JOB, ns, str(owner["name"]))
    return None


def parse_gang_name(text: str, namespace: str) -> tuple[tuple[str, ...], str, str]:
    """``podgroup/NAME`` (or ``pg/``, ``job/``, ``jobset/``, ``lws/``, ``workload/``) read as the
    memberships it may mean, the namespace and the name; a GangError names the kinds otherwise."""
    kind, sep, name = text.strip().partition("/")
    kinds = KIND_NAMES.get(kind.lower())
    if not sep or kinds is None or not name.strip():
        raise GangError(f"{text!r} is not a group: use KIND/NAME with KIND one of {', '.join(sorted(KIND_NAMES))}")
    return kinds, namespace, name.strip()


def find_gang(
    text: str,
    namespace: str,
    pods: Iterable[Mapping[str, Any]],
    objects: Mapping[GangRef, Mapping[str, Any]] | None = None,
) -> Gang:
    """The group `text` names in `namespace` (see :func:`parse_gang_name`), from the pods that say
    they belong to it and, when given, the group's own object (its size)."""
    kinds, ns, name = parse_gang_name(text, namespace)
    found: dict[GangRef, list[Mapping[str, Any]]] = {}
    for pod in pods:
        ref = gang_of(pod)
        if ref is not None and ref.namespace == ns and ref.kind in kinds and _named(ref, name):
            found.setdefault(ref, []).append(pod)
    if not found:
        raise GangError(f"no pod in namespace {ns} belongs to {text} ({' or '.join(kinds)})")
    if len(found) > 1:
        which = ", ".join(str(r) for r in sorted(found))
        raise GangError(f"{text} names several groups: {which}; name one of them (for example by its kind)")
    ref, members = next(iter(found.items()))
    return gang(ref, members, (objects or {}).get(ref))


def _named(ref: GangRef, name: str) -> bool:
    # A Workload's pod group or a LeaderWorkerSet's group is named in full (name/group), or by its
    # workload's name when that has one group only (checked by find_gang: several groups refuse).
    return ref.name == name or ref.name.startswith(f"{name}/")


def gang(ref: GangRef, members: Iterable[Mapping[str, Any]], obj: Mapping[str, Any] | None = None) -> Gang:
    """A group with its size: from its object when given, else from its members' own fields."""
    pods = tuple(sorted(members, key=lambda p: str(_meta(p).get("name") or "")))
    size, where = _size(ref, pods, obj)
    if size < 1:
        raise GangError(f"{ref} asks for {size} members at once ({where}): nothing to make room for")
    return Gang(ref, size, pods, where)


def object_path(ref: GangRef) -> str:
    """The API path of the object that states the group's size."""
    ns, name = ref.namespace, ref.name.partition("/")[0]
    paths = {
        NATIVE: f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{ns}/podgroups/{name}",
        WORKLOAD: f"/apis/scheduling.k8s.io/v1alpha1/namespaces/{ns}/workloads/{name}",
        COSCHEDULING: f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups/{name}",
        VOLCANO: f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups/{name}",
        KUEUE: "",  # its size is on the pods themselves
        JOBSET: f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/{name}",
        LWS: f"/apis/leaderworkerset.x-k8s.io/v1/namespaces/{ns}/leaderworkersets/{name}",
        JOB: f"/apis/batch/v1/namespaces/{ns}/jobs/{name}",
    }
    return paths[ref.kind]


def _size(ref: GangRef, pods: tuple[Mapping[str, Any], ...], obj: Mapping[str, Any] | None) -> tuple[int, str]:
    spec = (obj or {}).get("spec") or {}
    if obj is not None and ref.kind in (NATIVE, WORKLOAD):
        policy = spec.get("schedulingPolicy") or {}
        if ref.kind == WORKLOAD:  # 1.35: the Workload's podGroups[name].policy
            group = ref.name.split("/")[1]
            policy = next((g.get("policy") or {} for g in spec.get("podGroups") or () if g.get("name") == group), {})
        if "gang" in policy:
            return _int((policy.get("gang") or {}).get("minCount"), ref, "minCount"), "its gang policy's minCount"
        return 1, "a basic (not gang) scheduling policy: each pod alone"
    if obj is not None and ref.kind in (COSCHEDULING, VOLCANO):
        return _int(spec.get("minMember"), ref, "minMember"), "its PodGroup's spec.minMember"
    if obj is not None and ref.kind == JOB:
        return _int(spec.get("parallelism", 1), ref, "parallelism"), "the Job's spec.parallelism"
    if obj is not None and ref.kind == LWS:
        size = (spec.get("leaderWorkerTemplate") or {}).get("size", 1)
        return _int(size, ref, "leaderWorkerTemplate.size"), "the LeaderWorkerSet's group size"
    if obj is not None and ref.kind == JOBSET:
        return _jobset_size(ref, spec), "the JobSet's replicated Jobs (replicas x parallelism)"
    if ref.kind == KUEUE:
        totals = {(_meta(p).get("annotations") or {}).get(KUEUE_TOTAL_ANNOTATION) for p in pods} - {None}
        if len(totals) == 1:
            return _int(totals.pop(), ref, KUEUE_TOTAL_ANNOTATION), f"its pods' {KUEUE_TOTAL_ANNOTATION}"
    return len(pods), "the members seen (the group's own object was not read)"


def _jobset_size(ref: GangRef, spec: Mapping[str, Any]) -> int:
    total = 0
    for rj in spec.get("replicatedJobs") or ():
        job_spec = ((rj.get("template") or {}).get("spec")) or {}
        total += _int(rj.get("replicas", 1), ref, "replicas") * _int(job_spec.get("parallelism", 1), ref, "parallelism")
    return total


def _int(value: object, ref: GangRef, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise GangError(f"{ref}: {field} is {value!r}, not a whole number")
    try:
        return int(value)
    except ValueError as e:
        raise GangError(f"{ref}: {field} is {value!r}, not a whole number") from e
