"""`inspect`: every GPU, its usage, and how fragmented the cluster is, from the live cluster or a
snapshot, as tables, a heatmap or a snapshot document."""

from __future__ import annotations

import sys
from typing import Any

import click

from hami_place_core import annotations as ann
from hami_place_core.examples import resolve_snapshot
from hami_place_core.fragmentation import ClusterMetrics, cluster_metrics, mix_from_state
from hami_place_core.snapshot import load_snapshot, make_snapshot
from hami_place_core.state import ClusterState, build_state
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.ops.args import InspectOptions
from kubectl_hami_place.ops.cluster import connect, load_cluster, warn_unreadable
from kubectl_hami_place.ops.render import (
    heatmap,
    natural_sorted,
    render_tables,
    summary_table,
    use_color,
)
from kubectl_hami_place.printers import is_structured, print_structured


def _select_nodes(state: ClusterState, names: tuple[str, ...]) -> list[str]:
    """The nodes to show: those named, in the order given (as kubectl get does), or every node with
    a HAMi GPU inventory (or an unreadable one) in natural order, gpu-node-2 before gpu-node-10."""
    if not names:
        return natural_sorted(n for n, node in state.nodes.items() if node.devices or node.register.format == "invalid")
    missing = [n for n in names if n not in state.nodes]
    if missing:
        raise UserError(f"node {', '.join(missing)} not found")
    return list(names)


def _read(options: InspectOptions) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """The raw nodes and pods, from the snapshot or the live cluster, and where they came from."""
    if options.snapshot:
        raw_nodes, raw_pods, meta = load_snapshot(resolve_snapshot(options.snapshot))
        source = f"snapshot {options.snapshot} ({meta.get('source', 'unknown source')})"
        if options.selector:
            raise UserError("-l/--selector cannot be combined with --snapshot; name the nodes instead")
        return raw_nodes, raw_pods, source
    kube = connect(options.kube)
    raw_nodes, raw_pods = load_cluster(kube, options.selector)
    return raw_nodes, raw_pods, kube.server


def inspect(options: InspectOptions) -> None:
    output, namespace = options.output, options.kube.namespace
    if options.show_heatmap and output != "table":
        raise click.UsageError(f"--heatmap and -o {output} are two views of the cluster: use one")
    raw_nodes, raw_pods, source = _read(options)
    state = build_state(raw_nodes, raw_pods)
    metrics = cluster_metrics(state, mix_from_state(state))
    names = _select_nodes(state, options.nodes)
    one_namespace = bool(namespace) and not options.kube.all_namespaces
    if one_namespace:  # the nodes that namespace's pods run on
        running = {p.node for key, p in state.pods.items() if key.split("/", 1)[0] == namespace}
        names = [n for n in names if n in running]
        if not names:
            click.echo(f"no GPU node runs a pod of namespace {namespace}", err=True)
    if options.nodes or one_namespace:
        keep = set(names)
        raw_nodes = [n for n in raw_nodes if n.get("metadata", {}).get("name") in keep]
        state, metrics = _restrict(state, metrics, keep)
    warn_unreadable(state)  # about what is shown, once the command is sure to answer
    if is_structured(output):
        print_structured(make_snapshot(raw_nodes, raw_pods, state, metrics, source), output)
    elif options.show_heatmap:
        click.echo(heatmap(state, metrics, names, color=use_color(sys.stdout.isatty())))
    else:
        _print_tables(state, metrics, names, options, one_namespace)


def _print_tables(
    state: ClusterState, metrics: ClusterMetrics, names: list[str], options: InspectOptions, one_namespace: bool
) -> None:
    if not names and not one_namespace:
        click.echo(f"no nodes with a HAMi GPU inventory ({ann.NODE_REGISTER}) found", err=True)
    if options.output == "summary":
        if names:
            click.echo(summary_table(state, metrics, names, headers=not options.no_headers))
        return
    click.echo(render_tables(state, metrics, names, wide=options.output == "wide", headers=not options.no_headers))


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
