"""`kubectl hami-place status`: placements with phase, target, pod and age; `-w` follows live."""

from __future__ import annotations

import click

from kubectl_hami_place.ops.args import KubeOptions, ListOptions
from kubectl_hami_place.options import (
    OUTPUT_FORMATS,
    kube_options,
    no_headers_option,
    output_formats,
    selector_option,
    sort_by_option,
    watch_option,
)


@click.command()
@click.argument("name", required=False)
@selector_option("Only placements with these labels (e.g. -l app=web).")
@watch_option("Watch: after the list, print a row each time a placement changes (with NAME: until it ends).")
@output_formats(
    (*OUTPUT_FORMATS, "name"),
    "Output format: table, wide (more columns), json or yaml (a List of the HamiPodPlacements, as kubectl "
    "get prints them), name (hamipodplacement.scheduling.hami.placement.com/NAME).",
    "{.items[*].status.phase}",
)
@no_headers_option
@sort_by_option
@kube_options
def status(
    name: str | None,
    selector: str | None,
    watch: bool,
    output: str,
    no_headers: bool,
    sort_by: str | None,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
) -> None:
    """List placements: phase, reason, target, pod and age.

    Reads HamiPodPlacements from the API server (no agent needed). -o wide adds the reqID and
    the message; -o json/yaml print the placements as `kubectl get` does (a v1 List of the
    objects; with -w, one object per change); -o name and -o jsonpath=TEMPLATE work as in kubectl.

    \b
    Examples:
      kubectl hami-place status
      kubectl hami-place status -A -o wide
      kubectl hami-place status web-3fa9c2d1e0 -n ml -w
      kubectl hami-place status -o json | jq '.items[] | select(.status.phase=="Failed")'
      kubectl hami-place status -o jsonpath='{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}'
      kubectl hami-place status -o name | xargs kubectl describe
    """
    from kubectl_hami_place.ops.status import status as run

    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    run(ListOptions(name, selector, watch, output, no_headers, sort_by, kube))
