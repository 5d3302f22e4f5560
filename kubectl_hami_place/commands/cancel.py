"""`kubectl hami-place cancel`: withdraw a placement that has not been consumed yet."""

from __future__ import annotations

import click

from kubectl_hami_place.ops.args import CancelOptions, KubeOptions
from kubectl_hami_place.options import (
    kube_options,
)


@click.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Also cancel a placement already claimed by a pod or mid-move.")
@kube_options
def cancel(
    name: str,
    force: bool,
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    request_timeout: float | None,
) -> None:
    """Withdraw a placement that has not been consumed yet.

    Deletes it with a resourceVersion precondition, so a pod that claims it at the same moment
    wins and the command says so. A placement already claimed, or mid-move (its pod evicted), is
    only cancelled with --force: the replacement then schedules wherever HAMi puts it.

    \b
    Examples:
      kubectl hami-place cancel web-3fa9c2d1e0 -n ml
      kubectl hami-place cancel trainer-7d9f-abcde-1a2b3c4d5e --force
    """
    from kubectl_hami_place.ops.placements import cancel as run

    run(CancelOptions(name, force, KubeOptions(kubeconfig, context, namespace, all_namespaces, request_timeout)))
