"""Moves from the command line, shared by `plan`, `defrag` and `defrag --for`: how a planned move
reads, and how one is made (a HamiPodPlacement with evictPod, followed until it ends)."""

from __future__ import annotations

from collections.abc import Iterable

from hami_place_core import placement as hp
from hami_place_core.planning import Move
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops.args import MoveSettings
from kubectl_hami_place.ops.placements import create_placement, follow_placement, placement_manifest, refuse_surge
from kubectl_hami_place.ops.workloads import get_pod, pod_workload
from kubectl_hami_place.options import STRATEGIES


def namespace_only(pods: Iterable[str], namespace: str | None) -> dict[str, str]:
    """The pods a plan keeps where they are when -n names a namespace (every other namespace's),
    as PlanOptions.kept_pods; {} without -n."""
    if not namespace:
        return {}
    why = f"not in namespace {namespace} (-n)"
    return {key: why for key in pods if key.split("/", 1)[0] != namespace}


def describe_move(m: Move) -> str:
    """`ns/pod: node gpu-0 -> node2 gpu-1 (why; frees ...; takes ...)`."""
    frm = ",".join(f"gpu-{i}" for i in m.from_gpus)
    frees = f"; frees {', '.join(m.frees)}" if m.frees else ""
    takes = f"; takes {', '.join(m.takes)}" if m.takes else ""
    return f"{m.pod}: {m.from_node} {frm} -> {m.to_node} {','.join(m.gpu_devices)} ({m.reason}{frees}{takes})"


def execute_move(kube: Kube, m: Move, settings: MoveSettings) -> None:
    """One move through a HamiPodPlacement with evictPod, followed until Completed (UserError if not)."""
    pod = get_pod(kube, m.namespace, m.name)
    strategy = STRATEGIES[settings.strategy or "evict"]
    if strategy == hp.SURGE:
        refuse_surge(pod)
    wl = pod_workload(kube, pod)
    req_id = hp.new_req_id()
    name = hp.placement_name(f"defrag-{m.name}", req_id)
    manifest = placement_manifest(
        m.namespace,
        name,
        req_id,
        wl.selector,
        m.to_node,
        tuple(m.gpu_devices),
        m.name,
        settings.eviction_timeout,
        strategy,
    )
    manifest["metadata"]["labels"][hp.CREATED_BY_LABEL] = "kubectl-hami-place-defrag"
    create_placement(kube, manifest, None)
    follow_placement(kube, m.namespace, name, settings.agent, settings.timeout)
