"""Shared click option stacks (as sqlite-utils does), so every command spells flags like kubectl."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT_FORMATS = ("table", "wide", "json", "yaml")


def kube_options(fn: F) -> F:
    """--kubeconfig, --context, -n/--namespace, -A/--all-namespaces, --request-timeout."""
    decorators = [
        click.option(
            "--kubeconfig",
            envvar="KUBECONFIG",
            metavar="PATH",
            help="Path to the kubeconfig file (default: $KUBECONFIG or ~/.kube/config).",
        ),
        click.option("--context", metavar="NAME", help="The kubeconfig context to use."),
        click.option("-n", "--namespace", metavar="NS", help="The namespace (default: the context's namespace)."),
        click.option("-A", "--all-namespaces", is_flag=True, help="Act on all namespaces."),
        click.option(
            "--request-timeout",
            type=click.FloatRange(min=0.1),
            metavar="SECONDS",
            help="Give up on a single API request after this many seconds.",
        ),
    ]
    for d in reversed(decorators):
        fn = d(fn)
    return fn


def output_option(fn: F) -> F:
    return click.option(
        "-o",
        "--output",
        type=click.Choice(OUTPUT_FORMATS),
        default="table",
        show_default=True,
        help="Output format: table, wide (more columns), json or yaml.",
    )(fn)


def selector_option(help_text: str) -> Callable[[F], F]:
    return click.option("-l", "--selector", metavar="SELECTOR", help=help_text)
