"""`kubectl hami-place inspect`: every GPU, its usage, and how fragmented the cluster is."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from hami_place_core import annotations as ann
from hami_place_core.examples import resolve_snapshot
from hami_place_core.fragmentation import ClusterMetrics, cluster_metrics, mix_from_state
from hami_place_core.snapshot import load_snapshot, make_snapshot
from hami_place_core.state import ClusterState, build_state
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.options import kube_options, no_headers_option, output_formats, selector_option
from kubectl_hami_place.printers import is_structured, print_structured
from kubectl_hami_place.render import (
    heatmap,
    natural_sorted,
    render_tables,
    summary_table,
    use_color,
    warn_unreadable,
)

INSPECT_FORMATS = ("table", "wide", "summary", "json", "yaml")


def load_cluster(
    kube: Kube, node_selector: str | None, nodes_read: Callable[[], None] | None = None
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


def live_state(kube: Kube, node_selector: str | None = None, warn: bool = True) -> ClusterState:
    """The cluster as HAMi accounts it now, read from the API server (only the selected nodes);
    `warn`: say on stderr what could not be read (once per command, not per re-plan)."""
    nodes, pods = load_cluster(kube, node_selector)
    state = build_state(nodes, pods)
    if warn:
        warn_unreadable(state)
    return state


def _select_nodes(state: ClusterState, names: tuple[str, ...]) -> list[str]:
    """The nodes to show: those named, in the order given (as kubectl get does), or every node with
    a HAMi GPU inventory (or an unreadable one) in natural order, gpu-node-2 before gpu-node-10."""
    if not names:
        return natural_sorted(n for n, node in state.nodes.items() if node.devices or node.register.format == "invalid")
    missing = [n for n in names if n not in state.nodes]
    if missing:
        raise UserError(f"node {', '.join(missing)} not found")
    return list(names)


@click.command()
@click.argument("nodes", nargs=-1, metavar="[NODE]...")
@selector_option("Only nodes with these labels (e.g. -l nvidia.com/gpu.product=A100).")
@output_formats(
    INSPECT_FORMATS,
    "Output format: table (a table per node), wide (more columns), summary (one line per node, for large "
    "clusters), json (a snapshot that --snapshot reads) or yaml.",
    "{.summary.cluster.wholeFree}",
)
@no_headers_option
@click.option("--heatmap", "show_heatmap", is_flag=True, help="Draw one cell per GPU for the whole cluster.")
@click.option(
    "--snapshot",
    type=click.Path(dir_okay=False),
    metavar="FILE",
    help="Read a snapshot written by `inspect -o json` instead of the live cluster; `example` is the "
    "shipped 1,213-node openb cluster (a local file named example: ./example).",
)
@kube_options
def inspect(
    nodes: tuple[str, ...],
    selector: str | None,
    output: str,
    no_headers: bool,
    show_heatmap: bool,
    snapshot: str | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
) -> None:
    """Show each GPU's memory, cores and share slots, the pods on it, and fragmentation.

    Reads the API server directly (no agent needed), or a snapshot file. FREE is the share of a
    GPU still usable; "stranded" is free capacity no whole-GPU request can use; FGD is the
    expected capacity the current workload mix cannot use (lower is better).

    \b
    Examples:
      kubectl hami-place inspect
      kubectl hami-place inspect gpu-node-1 gpu-node-2 -o wide
      kubectl hami-place inspect -l gpu=on --heatmap
      kubectl hami-place inspect -n ml -o summary      # the nodes namespace ml's pods run on
      kubectl hami-place inspect -o summary --no-headers | sort -k4 -n   # one line per node
      kubectl hami-place inspect -o jsonpath='{.summary.cluster.wholeFree}'
      kubectl hami-place inspect -o json > snap.json && kubectl hami-place inspect --snapshot snap.json
    """
    if show_heatmap and output != "table":
        raise click.UsageError(f"--heatmap and -o {output} are two views of the cluster: use one")
    if snapshot:
        raw_nodes, raw_pods, meta = load_snapshot(resolve_snapshot(snapshot))
        source = f"snapshot {snapshot} ({meta.get('source', 'unknown source')})"
        if selector:
            raise UserError("-l/--selector cannot be combined with --snapshot; name the nodes instead")
    else:
        kube = Kube(kubeconfig, context, namespace, all_namespaces, request_timeout)
        raw_nodes, raw_pods = load_cluster(kube, selector)
        source = kube.server
    state = build_state(raw_nodes, raw_pods)
    metrics = cluster_metrics(state, mix_from_state(state))
    names = _select_nodes(state, nodes)
    if namespace and not all_namespaces:  # the nodes that namespace's pods run on
        running = {p.node for key, p in state.pods.items() if key.split("/", 1)[0] == namespace}
        names = [n for n in names if n in running]
        if not names:
            click.echo(f"no GPU node runs a pod of namespace {namespace}", err=True)
    if nodes or (namespace and not all_namespaces):
        keep = set(names)
        raw_nodes = [n for n in raw_nodes if n.get("metadata", {}).get("name") in keep]
        state, metrics = _restrict(state, metrics, keep)
    warn_unreadable(state)  # about what is shown, once the command is sure to answer
    if is_structured(output):
        print_structured(make_snapshot(raw_nodes, raw_pods, state, metrics, source), output)
        return
    if show_heatmap:
        click.echo(heatmap(state, metrics, names, color=use_color(sys.stdout.isatty())))
        return
    if not names and not (namespace and not all_namespaces):
        click.echo(f"no nodes with a HAMi GPU inventory ({ann.NODE_REGISTER}) found", err=True)
    if output == "summary":
        if names:
            click.echo(summary_table(state, metrics, names, headers=not no_headers))
        return
    click.echo(render_tables(state, metrics, names, wide=output == "wide", headers=not no_headers))


def _restrict(state: ClusterState, metrics: ClusterMetrics, keep: set[str]) -> tuple[ClusterState, ClusterMetrics]:
    """The named nodes only; the workload mix stays the cluster's, so FGD values are comparable."""
    sub = ClusterState(
        nodes={n: s for n, s in state.nodes.items() if n in keep},
        pods={k: p for k, p in state.pods.items() if p.node in keep},
        problems={k: m for k, m in state.problems.items() if k in state.pods and state.pods[k].node in keep},
        by_node={n: keys for n, keys in state.by_node.items() if n in keep},
        pod_requests={k: v for k, v in state.pod_requests.items() if v[0] in keep},
        requested={n: r for n, r in state.requested.items() if n in keep},
    )
    return sub, cluster_metrics(sub, metrics.mix)
