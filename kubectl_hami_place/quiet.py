"""stdout carries only what the user asked for, whatever a dependency prints.

A solver may write to the process's standard output on its own: highspy 1.16 prints
"Running HiGHS 1.16.0 (git hash: ...): Copyright ..." when a model is made, before any option can
silence it, and `plan -o json | jq` then fails (issue 40). While the planner runs, file descriptor 1
(and Python's sys.stdout) point at stderr; the command prints its output after.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Within the block, what anything writes to stdout (Python or C, through fd 1) goes to stderr."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no fd 1 at all (a closed stdout): nothing to protect
        yield
        return
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
