"""The repository's scripts (release/*.py) loaded as modules, for the tests that check them: they
are run as files, not imported from a package."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """e.g. load_script("release/release.py")."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(path.stem + "_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
