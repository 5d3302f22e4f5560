"""How the harness is put together: no test module imports another (shared code lives in a helper
module such as tests/planner_fixtures.py, or in testbed/; conftest fixtures come through pytest), and
no file reaches a package by editing sys.path (bench/, release/ and testbed/ are packages run with
`python -m`, under the import contracts of .importlinter). Pure: reads the source only."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ("tests", "testbed", "bench", "release", "toolchain")


def _sources(*tops: str) -> list[Path]:
    return sorted(p for top in tops for p in (ROOT / top).rglob("*.py") if "tools" not in p.relative_to(ROOT).parts)


def _imported(tree: ast.AST, module: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of every import, function-local ones included; relative ones resolved."""
    package = module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([base] if base else [])])
            # `from tests.unit import test_x` names the module in the alias
            yield from ((node.lineno, f"{base}.{a.name}") for a in node.names)
            yield node.lineno, base


def _is_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and any(p.startswith("test_") or p == "conftest" for p in parts[1:])


@pytest.mark.parametrize("path", _sources("tests"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_test_module_imports_another(path: Path) -> None:
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    tree = ast.parse(path.read_text(), str(path))
    found = sorted({f"line {line}: {name}" for line, name in _imported(tree, module) if _is_test_module(name)})
    assert not found, f"{module} imports a test module (move what it shares to a helper or testbed/): {found}"


def test_the_check_sees_a_test_module_imported_inside_a_function() -> None:
    tree = ast.parse("def f():\n    from tests.unit.test_planner_exact import subset\n")
    assert [n for _, n in _imported(tree, "tests.unit.test_x") if _is_test_module(n)]
    tree = ast.parse("from tests.planner_fixtures import node\nfrom tests.cli.live import Live\n")
    assert not [n for _, n in _imported(tree, "tests.unit.test_x") if _is_test_module(n)]


def _edits_sys_path(tree: ast.AST) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "path"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "sys"
        and node.attr in {"insert", "append", "extend"}
    ]


@pytest.mark.parametrize("path", _sources(*HARNESS), ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_edits_sys_path(path: Path) -> None:
    lines = _edits_sys_path(ast.parse(path.read_text(), str(path)))
    assert not lines, f"{path.relative_to(ROOT)} edits sys.path at lines {lines}: run it with `python -m` instead"
