"""Only the planning engine changes its own arrays: every module above it (the searches, the room
search, the harness's MILP) reads them and changes them through the engine's verbs (seed an
empty GPU, allow reroutes, apply, take back, remember a failed search...).

An AST walk over the product and the harness finds every write through a reference to an engine
(a name or ``self.<name>`` bound to one: ``e``, ``engine``, a parameter typed ``Engine``, or an
alias of one of its arrays): an assignment, an augmented assignment or a ``del`` of one of its
attributes or of anything inside one (``e.g_seed[g] = True``, ``e.g_use[g].used -= 1``), or a
mutating method called on one (``e.evacuated.append(g)``)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "hami_place_core" / "planning" / "engine.py"
SCANNED = ("hami_place_core", "testbed", "bench")
MUTATORS = frozenset(
    {"append", "extend", "insert", "pop", "popitem", "remove", "clear", "update", "setdefault", "sort", "reverse"}
    | {"add", "discard", "__setitem__", "__delitem__", "__iadd__", "__isub__"}
)
CONVENTIONAL = frozenset({"e", "engine"})


def engine_attributes() -> frozenset[str]:
    """Every attribute the engine's classes declare or set on self."""
    tree = ast.parse(ENGINE.read_text())
    names: set[str] = set()
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        for n in ast.walk(cls):
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
                names.add(n.target.id)
            elif (
                isinstance(n, ast.Attribute)
                and isinstance(n.ctx, ast.Store)
                and isinstance(n.value, ast.Name)
                and n.value.id == "self"
            ):
                names.add(n.attr)
            elif isinstance(n, ast.FunctionDef) and not n.name.startswith("__"):
                names.add(n.name)
    return frozenset(names)


ATTRIBUTES = engine_attributes()


class Writes:
    """The writes to an engine in one module's source."""

    def __init__(self, source: str) -> None:
        self.tree = ast.parse(source)
        self.names = set(CONVENTIONAL)
        self.self_names = set(CONVENTIONAL)
        self.aliases: dict[str, str] = {}
        self._bind()

    def _bind(self) -> None:
        for n in ast.walk(self.tree):
            if isinstance(n, ast.arg) and isinstance(n.annotation, ast.Name) and n.annotation.id == "Engine":
                self.names.add(n.arg)
            if isinstance(n, ast.arg) and isinstance(n.annotation, ast.Constant) and n.annotation.value == "Engine":
                self.names.add(n.arg)
        for n in ast.walk(self.tree):
            if not isinstance(n, ast.Assign):
                continue
            for target in n.targets:
                pairs: list[tuple[ast.expr, ast.expr]] = [(target, n.value)]
                if isinstance(target, ast.Tuple) and isinstance(n.value, ast.Tuple):
                    pairs = list(zip(target.elts, n.value.elts, strict=False))
                for t, v in pairs:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        if isinstance(v, ast.Name) and v.id in self.names:
                            self.self_names.add(t.attr)
                    elif isinstance(t, ast.Name) and self._attribute_of_engine(v) is not None:
                        self.aliases[t.id] = f"{t.id} (= {ast.unparse(v)})"

    def _is_engine(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.names
        return (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr in self.self_names
        )

    def _attribute_of_engine(self, node: ast.expr) -> str | None:
        if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTES and self._is_engine(node.value):
            return node.attr
        return None

    def _written(self, node: ast.expr, inside: bool) -> str | None:
        """The engine attribute (or alias of one) that writing to `node` changes, if any."""
        while True:
            attribute = self._attribute_of_engine(node)
            if attribute is not None:
                return attribute
            if inside and isinstance(node, ast.Name) and node.id in self.aliases:
                return self.aliases[node.id]
            if not isinstance(node, ast.Attribute | ast.Subscript):
                return None
            node, inside = node.value, True

    def __iter__(self) -> Iterator[tuple[int, str]]:
        for n in ast.walk(self.tree):
            targets: list[ast.expr] = []
            if isinstance(n, ast.Assign | ast.Delete):
                targets = list(n.targets)
            elif isinstance(n, ast.AugAssign | ast.AnnAssign):
                targets = [n.target]
            for t in targets:
                for one in t.elts if isinstance(t, ast.Tuple | ast.List) else [t]:
                    written = self._written(one, inside=False)
                    if written is not None:
                        yield n.lineno, written
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in MUTATORS:
                written = self._written(n.func.value, inside=True)
                if written is not None:
                    yield n.lineno, f"{written}.{n.func.attr}()"


def test_no_module_but_the_engine_writes_its_arrays() -> None:
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path == ENGINE:
                continue
            for line, what in Writes(path.read_text()):
                found.append(f"{path.relative_to(ROOT)}:{line}: writes {what}")
    assert not found, "use (or add) an Engine verb instead:\n" + "\n".join(found)


def test_the_check_sees_every_kind_of_write() -> None:
    source = """
def f(e, x: Engine, g):
    e.g_seed[g] = True
    x.reroute = True
    e.g_use[g].used -= 1
    e.evacuated.append(g)
    del e.evacuated[3:]
    rooms = e.level_room
    rooms[4] = []
    a, e.scanned = 1, 2
    e.p_reason.pop(g, None)

class S:
    def __init__(self, engine):
        self.eng = engine

    def run(self):
        self.eng.misses.clear()
        self.eng.g_seed[0] = False
"""
    found = [what for _, what in Writes(source)]
    assert sorted(found) == sorted(
        [
            "g_seed",
            "reroute",
            "g_use",
            "evacuated.append()",
            "evacuated",
            "rooms (= e.level_room)",
            "scanned",
            "p_reason.pop()",
            "misses.clear()",
            "g_seed",
        ]
    )


def test_reads_and_verbs_are_not_writes() -> None:
    source = """
def f(e, g, records):
    level_room = e.level_room
    front = level_room.get(3)
    n = len(e.g_pods[g]) + e.scanned
    e.seed(g)
    e.take_back(records)
    e.give_reason(g, "why")
    pods = list(e.g_pods[g])
    pods.append(1)
    other = {}
    other[g] = e.g_use[g]
"""
    assert list(Writes(source)) == []
