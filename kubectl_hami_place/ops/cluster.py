"""Reading the live cluster: the client a command's kube flags name, the nodes and pods HAMi
accounts for as the core's ClusterState, and the warning about what could not be read. Shared by
inspect, status, policies, plan, defrag and making room; it renders nothing, so a command that
prints no table never loads tabulate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from hami_place_core import annotations as ann
from hami_place_core.state import ClusterState, build_state
from kubectl_hami_place import kube as kube_client
from kubectl_hami_place.ops.args import KubeOptions


def connect(options: KubeOptions) -> kube_client.Kube:
    """The client for these flags. Read through the module, so a test can put a fake in its place."""
    return kube_client.Kube(
        options.kubeconfig, options.context, options.namespace, options.all_namespaces, options.request_timeout
    )


def load_cluster(
    kube: kube_client.Kube, node_selector: str | None, nodes_read: Callable[[], None] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The nodes (those `node_selector` selects) and the unfinished pods on them; with a selector,
    pods elsewhere are left out, so other pools' pods are neither counted nor reported.
    `nodes_read` is called once the nodes are read (the credentials work by then)."""
    nodes = list(kube.list_all("/api/v1/nodes", labelSelector=node_selector))
    if nodes_read is not None:
        nodes_read()
    # HAMi ignores finished pods; filtering on the server keeps the transfer small on big clusters.
    pods = list(kube.list_all("/api/v1/pods", fieldSelector="status.phase!=Succeeded,status.phase!=Failed"))
    if node_selector:
        names = {(n.get("metadata") or {}).get("name") for n in nodes}
        pods = [p for p in pods if _node_of(p) in names]
    return nodes, pods


def _node_of(pod: dict[str, Any]) -> str | None:
    # HAMi's vgpu-node stands in for nodeName between its Filter and the bind.
    return (pod.get("spec") or {}).get("nodeName") or ((pod.get("metadata") or {}).get("annotations") or {}).get(
        ann.POD_VGPU_NODE
    )


def live_state(kube: kube_client.Kube, node_selector: str | None = None, warn: bool = True) -> ClusterState:
    """The cluster as HAMi accounts it now, read from the API server (only the selected nodes);
    `warn`: say on stderr what could not be read (once per command, not per re-plan)."""
    nodes, pods = load_cluster(kube, node_selector)
    state = build_state(nodes, pods)
    if warn:
        warn_unreadable(state)
    return state


def warn_unreadable(state: ClusterState) -> None:
    """One warning line on stderr when some node or pod carries unusable HAMi data: the command
    still answers for the rest of the cluster (exit 0), and says what it left out."""
    line = state.unreadable_summary()
    if line:
        click.echo(f"warning: {line}", err=True)
