"""Shared click option stacks (as sqlite-utils does), so every command spells flags like kubectl."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from hami_place_core.targets import TargetError, parse_targets

F = TypeVar("F", bound=Callable[..., Any])
_GUARDED = "_hami_place_blank_guarded"


def refuse_blank_values(cmd: click.Command) -> click.Command:
    """Every text option and argument of `cmd` refuses an empty or whitespace value, as a usage
    error (exit 2). An unset shell variable must never widen what a command does: `defrag --for
    "$POD" --apply` with POD unset would otherwise run a cluster-wide defrag, `-n ""` would list
    every namespace. One rule for every command (the group applies it when it loads one), so a new
    option cannot forget it; nothing in the CLI gives an empty value a meaning."""
    if getattr(cmd, _GUARDED, False):
        return cmd
    for param in cmd.params:
        param.callback = _blank_refusing(param.callback)
    setattr(cmd, _GUARDED, True)
    return cmd


def _blank_refusing(callback: Callable[..., Any] | None) -> Callable[..., Any]:
    def check(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        values = value if isinstance(value, tuple | list) else (value,)
        if any(isinstance(v, str) and not v.strip() for v in values):
            raise click.BadParameter("must not be empty or whitespace", ctx, param)
        return callback(ctx, param, value) if callback is not None else value

    return check


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
            type=Duration(),
            metavar="DURATION",
            callback=_positive,
            help="Give up on a single API request after this long (e.g. 5s, 1m; a bare number is seconds).",
        ),
    ]
    for d in reversed(decorators):
        fn = d(fn)
    return fn


def _positive(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and value < 0.1:
        raise click.BadParameter("must be at least 0.1s", ctx, param)
    return value


JSONPATH = "jsonpath="


class OutputFormat(click.Choice):
    """-o/--output: one of the command's formats, or kubectl's `jsonpath=TEMPLATE`, whose template is
    parsed here so that a bad one is a usage error (exit 2) naming the fault and its column."""

    def __init__(self, formats: tuple[str, ...]) -> None:
        super().__init__([*formats, f"{JSONPATH}TEMPLATE"])

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value.startswith(JSONPATH):
            from kubectl_hami_place.jsonpath import JsonPathError, parse

            try:
                parse(value[len(JSONPATH) :])
            except JsonPathError as e:
                self.fail(f"jsonpath template {value[len(JSONPATH) :]!r}: {e}", param, ctx)
            return value
        if value == "jsonpath":
            self.fail("jsonpath needs a template: -o jsonpath='{.items[*].metadata.name}'", param, ctx)
        return super().convert(value, param, ctx)

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        names = [c for c in self.choices if not str(c).startswith(JSONPATH)] + [JSONPATH]
        return [CompletionItem(n) for n in names if n.startswith(incomplete)]


def output_formats(formats: tuple[str, ...], help_text: str, example: str) -> Callable[[F], F]:
    """-o/--output with these formats plus jsonpath=TEMPLATE (default: the first one); `example` is
    a template for this command's -o json document."""
    return click.option(
        "-o",
        "--output",
        type=OutputFormat(formats),
        default=formats[0],
        show_default=True,
        help=f"{help_text} jsonpath=TEMPLATE: kubectl's JSONPath over what -o json prints "
        f"(e.g. -o jsonpath='{example}').",
    )


def output_option(fn: F) -> F:
    return output_formats(
        OUTPUT_FORMATS, "Output format: table, wide (more columns), json or yaml.", "{.metadata.name}"
    )(fn)


def create_output_option(fn: F) -> F:
    """-o for the commands that create a placement: also kubectl create's -o name (resource/name)."""
    return output_formats(
        (*OUTPUT_FORMATS, "name"),
        "Output format: table, wide (more columns), json, yaml, or name (the created object's resource/name).",
        "{.metadata.name}",
    )(fn)


def jsonpath_of(output: str) -> str | None:
    """The template of `-o jsonpath=TEMPLATE`, None for another format."""
    return output[len(JSONPATH) :] if output.startswith(JSONPATH) else None


def no_headers_option(fn: F) -> F:
    """kubectl's --no-headers: the table formats without their column-header line."""
    return click.option(
        "--no-headers",
        is_flag=True,
        help="Don't print the column headers of the table output formats (as kubectl's --no-headers).",
    )(fn)


def sort_by_option(fn: F) -> F:
    """kubectl get's --sort-by: a JSONPath over each item as -o json prints it."""
    return click.option(
        "--sort-by",
        metavar="JSONPATH",
        help="Sort the list by this field of each item as -o json prints it, as kubectl's --sort-by "
        "(e.g. --sort-by=.metadata.creationTimestamp); items without it come first.",
    )(fn)


def selector_option(help_text: str) -> Callable[[F], F]:
    return click.option("-l", "--selector", metavar="SELECTOR", help=help_text)


class Duration(click.ParamType):
    """`90`, `90s`, `5m`, `1h30m`: seconds as a float, as kubectl spells durations (one parser for
    the CLI, the webhook and the autopilot: hami_place_core/schedule.py). Defaults are given as
    text (``"10m"``) so that --help shows them the way they are typed."""

    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        from hami_place_core.schedule import ScheduleError, parse_duration

        if isinstance(value, int | float):
            return float(value)
        try:
            return parse_duration(str(value), bare_seconds=True)
        except ScheduleError as e:
            self.fail(str(e), param, ctx)


class DemandSpec(click.ParamType):
    """`8x2,4x4,1x50`: pods of k GPUs x how many (hami_place_core/capacity.py reads it); a
    malformed one is a usage error."""

    name = "demand"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from hami_place_core.capacity import Demand, DemandError, parse_demand

        if isinstance(value, Demand):
            return value
        try:
            return parse_demand(str(value))
        except DemandError as e:
            self.fail(str(e).removeprefix("--demand: "), param, ctx)


def _check_gpus(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    if not value:
        return value
    try:
        parse_targets(list(value))
    except TargetError as e:
        raise click.BadParameter(str(e), ctx, param) from e
    return value


def target_options(required: bool = True) -> Callable[[F], F]:
    """--node and --gpu (repeatable, gpu-N or gpu-N/P), checked for syntax before anything runs."""

    def deco(fn: F) -> F:
        fn = click.option(
            "--gpu",
            "gpus",
            multiple=True,
            required=required,
            callback=_check_gpus,
            metavar="gpu-N[/P]",
            help="A GPU of the target node by index; /P takes P percent of its memory and cores. Repeatable.",
        )(fn)
        return click.option("--node", required=required, metavar="NODE", help="The target node.")(fn)

    return deco


def agent_options(fn: F) -> F:
    """Where the agent is, for live progress through the API server's service proxy."""
    fn = click.option(
        "--agent-service",
        envvar="HAMI_PLACE_AGENT_SERVICE",
        metavar="NAME",
        help="The agent's Service (default: the one the chart labels for progress in --agent-namespace, "
        "whatever the release is called; else gpu-descheduler-webhook).",
    )(fn)
    return click.option(
        "--agent-namespace",
        envvar="HAMI_PLACE_AGENT_NAMESPACE",
        default="kube-system",
        show_default=True,
        metavar="NS",
        help="The agent's namespace.",
    )(fn)


def watch_option(help_text: str) -> Callable[[F], F]:
    return click.option("-w", "--watch", is_flag=True, help=help_text)


def planner_options(fn: F) -> F:
    """--objective, --demand, --solver, --max-moves-per-workload and --exclude-namespace: the
    planner's choices, shared by `plan` and `defrag` so that both plan alike."""
    decorators = [
        click.option(
            "--objective",
            type=click.Choice(["free-gpus", "fragmentation", "demand"]),
            default="free-gpus",
            show_default=True,
            help="Free as many whole GPUs as possible, or lower FGD fragmentation for the current workload mix, "
            "or make room for the demand (--demand) without breaking up completely free nodes: the room for "
            "every pod shape of the demand and the free nodes never end lower; each with as few moves as possible.",
        ),
        click.option(
            "--demand",
            type=DemandSpec(),
            metavar="SHAPES",
            help="The pods to make room for, GPUSxPODS comma-separated, e.g. 8x2,4x4,1x50 (whole GPUs); every "
            "plan reports their room before and after (default: the Pending GPU pods, else the running mix).",
        ),
        click.option(
            "--solver",
            type=click.Choice(["auto", "greedy", "exact"]),
            default="auto",
            show_default=True,
            help="free-gpus only. greedy: the fast planner alone; exact: also a MILP over where every pod ends "
            "(HiGHS, `pip install 'hami-place[exact]'`), whose plan is used when it frees more GPUs; auto: exact "
            "where HiGHS is installed and the cluster is small (about 16-32 GPU nodes; exact takes up to ~80).",
        ),
        click.option(
            "--max-moves-per-workload",
            type=click.IntRange(min=1),
            default=1,
            show_default=True,
            metavar="N",
            help="Disruption budget: moves per workload (controller); the agent still honours PDBs.",
        ),
        click.option(
            "--exclude-namespace",
            "excluded",
            multiple=True,
            metavar="NS",
            help="Never move pods of this namespace (repeatable; kube-system always).",
        ),
    ]
    for d in reversed(decorators):
        fn = d(fn)
    return fn


def eviction_timeout_option(help_text: str) -> Callable[[F], F]:
    return click.option("--eviction-timeout", type=Duration(), metavar="DURATION", help=help_text)


# --strategy's choices, kubectl-style lowercase, and the placement spec's values.
STRATEGIES = {"evict": "Evict", "surge": "Surge", "auto": "Auto"}
_STRATEGY_HELP = (
    "evict (the pod is evicted, PDBs respected; its controller recreates it on the target); surge (the new pod "
    "starts on the target first, the old one goes once it is Ready: no replica is lost; pods of Deployments and "
    "ReplicaSets without an autoscaler); auto (surge where safe, else evict)."
)


def strategy_option(lead: str, default: str | None = None) -> Callable[[F], F]:
    """How a move runs (the placement's spec.strategy), shared by `move` and `defrag`."""
    return click.option(
        "--strategy",
        type=click.Choice(list(STRATEGIES)),
        default=default,
        show_default=default is not None,
        help=f"{lead} {_STRATEGY_HELP}",
    )


# --timeout's default for the commands that move a pod and follow the move (move, evict).
DEFAULT_MOVE_TIMEOUT = "10m"


def dry_run_option(fn: F) -> F:
    """--dry-run for the commands that create a placement, as kubectl's."""
    return click.option(
        "--dry-run",
        type=click.Choice(["none", "client", "server"]),
        default="none",
        show_default=True,
        help="client: print the placement only; server: have the API server and the agent validate it.",
    )(fn)


def name_options(fn: F) -> F:
    """--name and --req-id of a placement a command creates."""
    fn = click.option("--name", "placement_name", metavar="NAME", help="Placement name (default: <workload>-<reqID>).")(
        fn
    )
    return click.option(
        "--req-id",
        metavar="ID",
        callback=_check_req_id,
        help="Request ID, 5-63 characters: letters, digits, '-', '_', '.' (default: random).",
    )(fn)


def _check_req_id(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """The CRD's rule for spec.reqID, checked before anything is sent (exit 2, as --gpu is)."""
    from hami_place_core import placement as hp

    if value is not None and (problem := hp.req_id_problem(value)):
        raise click.BadParameter(problem, ctx, param)
    return value
