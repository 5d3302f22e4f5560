"""Every third-party import of the shipped packages is declared in setup.cfg, where its user gets it:
the core and the CLI from install_requires, the agent also from the `agent` extra, the exact planner
(hami_place_core, imported lazily) from the `exact` extra. A transitive dependency that happens to be
installed (aiohttp came with the official client) must not be what makes an import work."""

from __future__ import annotations

import ast
import configparser
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"agent", "kubectl_hami_place", "hami_place_core"}
EXTRAS_OF = {"hami_place_core": ("exact",), "kubectl_hami_place": (), "agent": ("agent",)}


def _names(block: str) -> set[str]:
    out = set()
    for line in block.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.add(re.split(r"[<>=!~\[; ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return out


def _declared(part: str) -> set[str]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    names = _names(cfg["options"]["install_requires"])
    for extra in EXTRAS_OF[part]:
        names |= _names(cfg["options.extras_require"][extra])
    return names


def _third_party_imports(part: str) -> dict[str, str]:
    """top-level module -> one file importing it (imports inside functions count too)."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / part).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules = [node.module]
            else:
                continue
            for module in modules:
                top = module.split(".")[0]
                if top not in sys.stdlib_module_names and top not in LOCAL:
                    found.setdefault(top, str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("part", sorted(EXTRAS_OF))
def test_every_third_party_import_is_declared(part: str) -> None:
    dists = packages_distributions()
    declared = _declared(part)
    missing = {}
    for module, where in _third_party_imports(part).items():
        provided_by = {d.lower().replace("_", "-") for d in dists.get(module, [module])}
        if not provided_by & declared:
            missing[module] = f"{where} (distribution {', '.join(sorted(provided_by))})"
    assert not missing, f"undeclared in setup.cfg for {part}: {missing}"


def test_the_check_sees_the_imports_it_should() -> None:
    assert {"click", "tabulate", "urllib3"} <= set(_third_party_imports("kubectl_hami_place"))
    assert {"aiohttp", "sanic"} <= set(_third_party_imports("agent"))
    assert "kubernetes" not in {m for part in EXTRAS_OF for m in _third_party_imports(part)}, (
        "the shipped packages speak to Kubernetes through hami_place_core.kube, not the official client"
    )
