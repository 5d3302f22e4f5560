"""`kubectl hami-place policies`: the autopilot's HamiDefragPolicies and what they are doing."""

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
@selector_option("Only policies with these labels (e.g. -l team=ml).")
@watch_option("Watch: after the list, print a row (with NAME: the whole view) each time a policy changes.")
@output_formats(
    (*OUTPUT_FORMATS, "name"),
    "Output format: table, wide (more columns), json or yaml (a flat view with the spec and status), "
    "name (hamidefragpolicy.scheduling.hami.placement.com/NAME).",
    "{.items[*].state}",
)
@no_headers_option
@sort_by_option
@kube_options
def policies(
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
    """List the autopilot's HamiDefragPolicies and what they are doing.

    Reads the cluster-scoped HamiDefragPolicies from the API server (no agent needed): mode,
    state, what triggered the last evaluation, the current plan, moves succeeded/failed and when
    the agent last evaluated each. With NAME: the policy in detail (its triggers, scope, window
    and budgets, the plan's moves, the move in flight, recent moves, pods left out after a
    failed move, conditions). -o wide adds the message; -o json/yaml print a flat view with the
    spec and status, which -o jsonpath=TEMPLATE reads; -o name prints kubectl's resource/name.
    A policy in mode Apply evicts pods on its own (docs/autopilot.md).

    \b
    Examples:
      kubectl hami-place policies
      kubectl hami-place policies gpu-autopilot
      kubectl hami-place policies gpu-autopilot -w
      kubectl hami-place policies -o json | jq '.items[] | select(.state=="Blocked")'
      kubectl hami-place policies -o jsonpath='{.items[?(@.state=="Blocked")].name}'
      kubectl hami-place policies --no-headers | awk '$3 == "Blocked" {print $1}'
    """
    from kubectl_hami_place.ops.policies import policies as run

    kube = KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)
    run(ListOptions(name, selector, watch, output, no_headers, sort_by, kube))
