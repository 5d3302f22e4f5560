"""Whether this run is CI's: there, a test bed that cannot start fails the run instead of skipping."""

from __future__ import annotations

import os
from typing import NoReturn

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def unavailable(reason: str) -> NoReturn:
    """What a test does when a tool or component it needs is missing: fail under CI, which must
    have everything (a skip there would count as coverage it is not), skip elsewhere; with the reason."""
    import pytest

    if IN_CI:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
