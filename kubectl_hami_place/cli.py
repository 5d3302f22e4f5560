"""kubectl hami-place: the command group, and the mapping from failures to exit codes.

Exit codes: 0 ok, 1 user or cluster error, 2 usage error, 3 bug, 130 interrupted. Errors go to
stderr as one line; a traceback is printed only with --debug.
"""

from __future__ import annotations

import sys
import traceback

import click

from hami_place_core import __version__
from hami_place_core.kube_errors import KubeError
from hami_place_core.snapshot import SnapshotError
from hami_place_core.targets import TargetError
from kubectl_hami_place.errors import UserError

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 110}


@click.group(context_settings=CONTEXT_SETTINGS)
@click.option("--debug", is_flag=True, help="Print tracebacks for errors.")
@click.version_option(__version__, "--version", prog_name="kubectl hami-place")
def cli(debug: bool) -> None:
    """Pin, move and defragment GPU workloads on HAMi clusters.

    \b
    Examples:
      kubectl hami-place inspect                     # every GPU, its usage and fragmentation
      kubectl hami-place inspect gpu-node-1 -o wide  # one node, with GPU UUIDs
      kubectl hami-place inspect --heatmap           # the whole cluster at a glance
      kubectl hami-place inspect --snapshot snap.json  # offline, from a saved snapshot
    """


@cli.command()
def version() -> None:
    """Print the plugin version."""
    click.echo(f"kubectl-hami_place {__version__}")


def _register() -> None:
    # Each command lives in its own module; importing them here keeps `cli` the only entry point.
    from kubectl_hami_place import inspect_cmd

    cli.add_command(inspect_cmd.inspect)


_register()

USER_ERRORS = (UserError, KubeError, SnapshotError, TargetError)


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
        e.show()
        return EXIT_USAGE
    except click.ClickException as e:
        e.show()
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
