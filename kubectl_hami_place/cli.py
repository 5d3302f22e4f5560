"""kubectl hami-place: the command group, and the mapping from failures to exit codes.

Exit codes: 0 ok, 1 user or cluster error, 2 usage error, 3 bug, 130 interrupted. Errors go to
stderr as one line; a traceback is printed only with --debug.
"""

from __future__ import annotations

import importlib
import sys
import traceback

import click

from hami_place_core import __version__
from hami_place_core.kube.errors import KubeError
from hami_place_core.snapshot import SnapshotError
from hami_place_core.targets import TargetError
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.options import refuse_blank_values

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


# name -> (module, attribute, one-line help). Commands are imported only when run, so `--help`
# and shell completion never pay for the Kubernetes client or the model (issue: startup time).
# Every module is in kubectl_hami_place.commands, where the import contracts see it (a unit test).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "inspect": (
        "kubectl_hami_place.commands.inspect",
        "inspect",
        "Show every GPU, its usage, and how fragmented the cluster is.",
    ),
    "pin": ("kubectl_hami_place.commands.pin", "pin", "Pin the next pod of a workload to a node and exact GPUs."),
    "move": ("kubectl_hami_place.commands.move", "move", "Move a running pod to a node and exact GPUs."),
    "evict": ("kubectl_hami_place.commands.evict", "evict", "Evict a pod safely, and wait for its replacement."),
    "cancel": ("kubectl_hami_place.commands.cancel", "cancel", "Withdraw a placement that has not been consumed yet."),
    "status": ("kubectl_hami_place.commands.status", "status", "List placements: phase, reason, target, pod and age."),
    "policies": (
        "kubectl_hami_place.commands.policies",
        "policies",
        "List the autopilot's HamiDefragPolicies: mode, state, plan and moves.",
    ),
    "plan": ("kubectl_hami_place.commands.plan", "plan", "Plan the moves that free the most whole GPUs (no changes)."),
    "defrag": (
        "kubectl_hami_place.commands.defrag",
        "defrag",
        "Plan moves that free whole GPUs and execute them safely.",
    ),
    "completion": (
        "kubectl_hami_place.commands.completion",
        "completion",
        "Print a shell completion script (bash, zsh, fish).",
    ),
    "selftest": (
        "kubectl_hami_place.commands.selftest",
        "selftest",
        "Check this build offline: imports and a rendered table.",
    ),
}


# Hidden commands, loaded the same way: kubectl's plugin completion (kubectl_complete-hami_place).
HIDDEN: dict[str, tuple[str, str]] = {"__complete": ("kubectl_hami_place.commands.completion", "cobra_complete")}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, attr, _ = COMMANDS[cmd_name]
            cmd = getattr(importlib.import_module(module), attr)
            assert isinstance(cmd, click.Command)
            return refuse_blank_values(cmd)
        if cmd_name in HIDDEN:  # as given: `__complete`'s last word is often empty on purpose
            module, attr = HIDDEN[cmd_name]
            hidden = getattr(importlib.import_module(module), attr)
            assert isinstance(hidden, click.Command)
            return hidden
        found = super().get_command(ctx, cmd_name)
        return refuse_blank_values(found) if found is not None else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in COMMANDS]
        rows += [(n, c.get_short_help_str(80)) for n, c in self.commands.items() if not c.hidden]
        with formatter.section("Commands"):
            formatter.write_dl(sorted(rows))


@click.group(cls=LazyGroup, context_settings=CONTEXT_SETTINGS)
@click.option("--debug", is_flag=True, help="Print tracebacks for errors.")
@click.version_option(__version__, "--version", prog_name="kubectl hami-place")
def cli(debug: bool) -> None:
    """Pin, move and defragment GPU workloads on HAMi clusters.

    \b
    Examples:
      kubectl hami-place inspect                     # every GPU, its usage and fragmentation
      kubectl hami-place inspect --snapshot example  # offline: a shipped 1,213-node cluster
      kubectl hami-place pin deploy/trainer --node gpu-node-3 --gpu gpu-0 --gpu gpu-1
      kubectl hami-place move trainer-7d9f-abcde --node gpu-node-3 --gpu gpu-2 --evict
      kubectl hami-place status -A -w                # placements, live
      kubectl hami-place policies                    # the autopilot's policies and their plans
    """


# Not in COMMANDS, and not a module of commands/: it needs nothing but click, and a module of its
# own would be two more imports (commands/ and itself) on every start of the binary.
@cli.command()
def version() -> None:
    """Print the plugin version.

    \b
    Examples:
      kubectl hami-place version
    """
    click.echo(f"kubectl-hami_place {__version__}")


USER_ERRORS = (UserError, KubeError, SnapshotError, TargetError)


def usage_line(e: click.UsageError) -> str:
    """A usage error in one line, as every other error (kubectl's wording, its help pointer)."""
    where = e.ctx.command_path if e.ctx is not None else "kubectl hami-place"
    return f"error: {e.format_message().rstrip('.')} (see '{where} --help')"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="kubectl hami-place", standalone_mode=False)
        return EXIT_OK
    except click.exceptions.Exit as e:
        return int(e.exit_code)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except click.UsageError as e:
        click.echo(usage_line(e), err=True)
        return EXIT_USAGE
    except click.ClickException as e:
        click.echo(f"error: {e.format_message()}", err=True)
        return EXIT_ERROR
    except USER_ERRORS as e:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {e}", err=True)
        return EXIT_ERROR
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK  # `| head` closed the pipe: not an error
    except Exception as e:  # noqa: BLE001 - the last line of defence turns a bug into exit 3
        if debug:
            traceback.print_exc()
        click.echo(f"error: unexpected {type(e).__name__}: {e} (this is a bug; rerun with --debug)", err=True)
        return EXIT_BUG
