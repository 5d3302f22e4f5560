"""CLI errors. Anything a user or the cluster got wrong exits 1 with a one-line cause on stderr."""

from __future__ import annotations


class UserError(Exception):
    """Bad input, a missing object, a refused request: exit code 1, no traceback."""

    exit_code = 1
