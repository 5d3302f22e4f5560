"""Size limits of the product packages (issue 35): no module over MODULE_LINES lines and no class
over CLASS_LINES lines, unless a reason is written next to it.

Large modules and classes are where unrelated jobs grow together (a 1,032-line make_room.py, a
601-line search class); a limit a reviewer sees in CI keeps a split from being put off. A size
that has a reason says so in a comment starting with ``# size:`` on the line above the class
statement (or, for a module, in its first 5 lines), so the reason is read where the code is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("hami_place_core", "kubectl_hami_place", "agent")
MODULE_LINES = 800
CLASS_LINES = 300
REASON = "# size:"


def _modules() -> list[Path]:
    return sorted(p for pkg in PRODUCT for p in (ROOT / pkg).rglob("*.py"))


def _reason_above(lines: list[str], first: int) -> bool:
    """A `# size:` comment on the line above line `first` (1-based: the class or its first decorator)."""
    return first >= 2 and lines[first - 2].strip().startswith(REASON)


def oversized(path: Path, root: Path = ROOT) -> list[str]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    where = path.relative_to(root)
    found = []
    if len(lines) > MODULE_LINES and not any(line.startswith(REASON) for line in lines[:5]):
        found.append(f"{where}: {len(lines)} lines (limit {MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if size > CLASS_LINES and not _reason_above(lines, first):
                found.append(f"{where}: class {node.name} is {size} lines (limit {CLASS_LINES})")
    return found


def test_no_product_module_or_class_is_oversized_without_a_reason() -> None:
    found = [msg for path in _modules() for msg in oversized(path)]
    assert not found, "split these, or write the reason above them as '# size: ...':\n" + "\n".join(found)


def test_the_walk_sees_the_product() -> None:
    # Guards the test above from passing on an empty walk.
    assert len(_modules()) > 100


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        ("", 1),
        ("# size: a table of 40 rows, one per HAMi device\n", 0),
        ("@dataclass\n", 1),
        ("# size: one row per field of the CRD\n@dataclass\n", 0),
        ("# size: too far above\n\n", 1),
    ],
)
def test_a_long_class_needs_a_reason_right_above_it(tmp_path: Path, head: str, expected: int) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(CLASS_LINES + 1))
    (tmp_path / "m.py").write_text(f"{head}class Big:\n{body}", encoding="utf-8")
    assert len(oversized(tmp_path / "m.py", tmp_path)) == expected


def test_a_long_module_needs_a_reason_in_its_head(tmp_path: Path) -> None:
    long = "x = 1\n" * (MODULE_LINES + 1)
    (tmp_path / "a.py").write_text(long, encoding="utf-8")
    (tmp_path / "b.py").write_text("# size: generated from the CRD\n" + long, encoding="utf-8")
    assert len(oversized(tmp_path / "a.py", tmp_path)) == 1
    assert oversized(tmp_path / "b.py", tmp_path) == []
