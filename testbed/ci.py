"""Whether this run is CI's: there, a test bed that cannot start fails the run instead of skipping."""

from __future__ import annotations

import os

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
