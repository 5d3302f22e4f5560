"""The CLI's layout holds: every command the group loads by name lives in
kubectl_hami_place/commands/ (where .importlinter's contracts see it: a module loaded through
importlib is invisible to them), and every function-local import is one that pays at start-up,
listed below with why. Pure: reads the source, imports the commands."""

from __future__ import annotations

import ast
import importlib
from fnmatch import fnmatch
from pathlib import Path

import click
import pytest

from kubectl_hami_place.cli import COMMANDS, HIDDEN

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kubectl_hami_place"

# The one list of the CLI's function-local imports: (importing module, imported module, why).
# Everything else is imported at the top of its module. Costs: `python -X importtime`, cumulative,
# over what the group itself loads; bench/startup_bench.py times `--help`, `version`, `pin --help`,
# `inspect` and `status -A` as the binary.
LAZY: tuple[tuple[str, str, str], ...] = (
    (
        "kubectl_hami_place.commands.*",
        "kubectl_hami_place.ops.*",
        "a command's ops/ module is imported when it runs: `CMD --help` and the completion of its "
        "flags load click and ops/args.py alone (the Kubernetes layer is 15 ms, the planner 42 ms)",
    ),
    ("kubectl_hami_place.kube", "urllib3", "the HTTP client, 44 ms: only a request to the API server pays for it"),
    (
        "kubectl_hami_place.options",
        "click.shell_completion",
        "options.py loads with every command; only completing -o's values needs it (a module less per run)",
    ),
    (
        "kubectl_hami_place.ops.*",
        "tabulate",
        "16 ms with html and wcwidth: status and policies print an empty list, -o json/yaml/name without it",
    ),
    ("kubectl_hami_place.printers", "yaml", "11 ms, only for -o yaml (inspect and status -A print tables)"),
    ("kubectl_hami_place.printers", "kubectl_hami_place.jsonpath", "7 ms, only for -o jsonpath and --sort-by"),
    ("kubectl_hami_place.options", "kubectl_hami_place.jsonpath", "the same, while -o jsonpath=... is parsed"),
    (
        "kubectl_hami_place.options",
        "hami_place_core.schedule",
        "7 ms: options.py loads with the group (every --help); a duration is parsed only when given",
    ),
    (
        "kubectl_hami_place.options",
        "hami_place_core.capacity",
        "the model (state, Fit): options.py loads with the group (every --help); only a given --demand is read",
    ),
    (
        "kubectl_hami_place.options",
        "hami_place_core.placement",
        "12 ms: options.py loads with the group (every --help); only a given --req-id is checked",
    ),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _local_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, name) of every import inside a function (`from m import x` is m.x); module-level
    ones (also under `if TYPE_CHECKING:` or `try:`) are not."""
    out = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                out += [(node.lineno, alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                out += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return sorted(set(out))


def _listed(importer: str, name: str, who: str, what: str) -> bool:
    """Whether rule (who, what) covers `name` imported by `importer`: `what` or a name inside it."""
    return fnmatch(importer, who) and (fnmatch(name, what) or fnmatch(name, f"{what}.*"))


def _unlisted() -> list[str]:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for line, module in _local_imports(ast.parse(path.read_text())):
            if not any(_listed(importer, module, who, what) for who, what, _ in LAZY):
                bad.append(f"{path.relative_to(ROOT)}:{line}: import of {module} inside a function")
    return bad


def test_function_local_imports_are_only_the_listed_ones() -> None:
    assert _unlisted() == [], "move these to the top of their module, or list them in LAZY with why"


def test_the_walk_sees_a_function_local_import() -> None:
    tree = ast.parse("import a\n\ndef f():\n    import b\n    from c.d import e\n")
    assert _local_imports(tree) == [(4, "b"), (5, "c.d.e")]
    assert _listed("p.commands.x", "p.ops.y.run", "p.commands.*", "p.ops.*")
    assert not _listed("p.ops.y", "p.ops.z.run", "p.commands.*", "p.ops.*")


def test_every_lazy_rule_is_used() -> None:
    used = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = _module_name(path)
        for _, module in _local_imports(ast.parse(path.read_text())):
            used |= {(w, m) for w, m, _ in LAZY if _listed(importer, module, w, m)}
    assert used == {(w, m) for w, m, _ in LAZY}, "a rule of LAZY no longer matches an import: drop it"


@pytest.mark.parametrize(("name", "entry"), [*COMMANDS.items(), *HIDDEN.items()])
def test_every_command_the_group_loads_lives_in_the_commands_package(name: str, entry: tuple[str, ...]) -> None:
    module, attr = entry[0], entry[1]
    assert module.startswith("kubectl_hami_place.commands."), (name, module)
    assert module.count(".") == 2, (name, module)  # a module of commands/, where the contracts look
    assert isinstance(getattr(importlib.import_module(module), attr), click.Command)


def test_the_independence_contract_covers_the_commands_package() -> None:
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    contract = parser["importlinter:contract:cli-commands-independent"]
    assert contract["type"] == "independence"
    assert contract["modules"].split() == ["kubectl_hami_place.commands.*"]
