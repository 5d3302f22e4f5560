"""`kubectl hami-place inspect`: every GPU, its usage, and how fragmented the cluster is."""

from __future__ import annotations

import click

from kubectl_hami_place.ops.args import InspectOptions, KubeOptions
from kubectl_hami_place.options import kube_options, no_headers_option, output_formats, selector_option

INSPECT_FORMATS = ("table", "wide", "summary", "json", "yaml")


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
    from kubectl_hami_place.ops.inspect import inspect as run

    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    run(InspectOptions(nodes, selector, output, no_headers, show_heatmap, snapshot, kube))
