"""`-o jsonpath=TEMPLATE`: kubectl's JSONPath templates, a small and safe subset (nothing is eval'd).

Supported, as kubectl spells it (kubernetes.io/docs/reference/kubectl/jsonpath/):

- literal text outside braces, and quoted strings inside them: ``{"\\n"}``, ``{'\\t'}``;
- paths from the current object ``.`` / ``@`` or the root ``$``: ``{.a.b}``, ``{.a\\.b}`` (a key
  with a dot), ``{.a['b.c']}``, ``{.items[*]}``, ``{.items[0]}``, ``{.items[-1]}``,
  ``{.items[1:3]}``, ``{.a.*}``, ``{..name}`` (recursive descent) and filters
  ``{.items[?(@.phase=="Failed")]}`` (``==``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` against a
  string, number, true, false or null, or ``[?(@.x)]`` for "present and not empty");
- ``{range EXPR}...{end}``, nested.

As in ``kubectl get -o jsonpath``, a missing key prints nothing, several results of one
expression are joined by a space, strings print bare, objects and lists as compact JSON, and no
newline is added at the end. A template that does not parse raises JsonPathError with the
position of the fault (the CLI turns it into exit 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any


class JsonPathError(ValueError):
    """A template that does not parse: the message names the fault and its position."""


# ---- the parsed template ------------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    name: str


@dataclass(frozen=True)
class Wildcard:
    pass


@dataclass(frozen=True)
class Index:
    index: int


@dataclass(frozen=True)
class Slice:
    start: int | None
    stop: int | None
    step: int | None


@dataclass(frozen=True)
class Recursive:
    name: str  # "*": every descendant


@dataclass(frozen=True)
class Path:
    from_root: bool
    steps: tuple[Any, ...]


@dataclass(frozen=True)
class Filter:
    left: Path
    op: str | None  # None: [?(@.x)], "present and not empty"
    right: Any = None  # a literal, or a Path


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Expr:
    path: Path


@dataclass
class Range:
    path: Path
    body: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Template:
    source: str
    nodes: tuple[Any, ...]


def parse(template: str) -> Template:
    """The template's nodes; JsonPathError (with the column of the fault) when it does not parse."""
    if not template:
        raise JsonPathError("no template given (e.g. jsonpath='{.items[*].metadata.name}')")
    root: list[Any] = []
    stack: list[tuple[Range, int]] = []
    out = root
    pos = 0
    while pos < len(template):
        start = template.find("{", pos)
        if start < 0:
            out.append(Text(template[pos:]))
            break
        if start > pos:
            out.append(Text(template[pos:start]))
        end = _closing_brace(template, start)
        inner = template[start + 1 : end]
        column = start + 2 + (len(inner) - len(inner.lstrip()))  # 1-based, of the first character inside
        action = inner.strip()
        if not action:
            raise JsonPathError(f"empty expression {{}} at column {start + 1}")
        if action == "end":
            if not stack:
                raise JsonPathError(f"{{end}} at column {start + 1} closes no {{range}}")
            stack.pop()
            out = stack[-1][0].body if stack else root
        elif action == "range" or action.startswith(("range ", "range\t")):
            rest = action[5:]
            if not rest.strip():
                raise JsonPathError(f"{{range}} at column {start + 1} needs a path, e.g. {{range .items[*]}}")
            rng = Range(_path(rest.strip(), column + 5 + len(rest) - len(rest.lstrip())))
            out.append(rng)
            stack.append((rng, start + 1))
            out = rng.body
        elif action[0] in "\"'":
            text, used = _quoted(action, 0, column)
            if used != len(action):
                raise JsonPathError(f"unexpected {action[used:]!r} after the string at column {column + used}")
            out.append(Text(text))
        else:
            out.append(Expr(_path(action, column)))
        pos = end + 1
    if stack:
        raise JsonPathError(f"{{range}} at column {stack[-1][1]} has no {{end}}")
    return Template(template, tuple(root))


def _closing_brace(s: str, start: int) -> int:
    """The index of the `}` closing the `{` at `start` (braces inside quotes do not count)."""
    i = start + 1
    while i < len(s):
        c = s[i]
        if c in "\"'":
            _, used = _quoted(s, i, i + 1)
            i = used
            continue
        if c == "{":
            raise JsonPathError(f'unexpected "{{" at column {i + 1} inside the expression opened at column {start + 1}')
        if c == "}":
            return i
        i += 1
    raise JsonPathError(f'unclosed "{{" at column {start + 1}')


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def _quoted(s: str, i: int, column: int) -> tuple[str, int]:
    """The string quoted at s[i] (with \\n, \\t, \\r, \\\\ and escaped quotes), and the index after it."""
    quote, j, out = s[i], i + 1, []
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s):
            nxt = s[j + 1]
            if nxt not in _ESCAPES:
                raise JsonPathError(f"unknown escape \\{nxt} at column {column + j - i}")
            out.append(_ESCAPES[nxt])
            j += 2
            continue
        if c == quote:
            return "".join(out), j + 1
        out.append(c)
        j += 1
    raise JsonPathError(f"unterminated string {s[i:]!r} at column {column}")


def _path(text: str, column: int) -> Path:
    """A path: [$|@] then .name, .*, ..name, [N], [a:b], [*], ['key'] or [?(filter)] steps."""
    if not text:
        raise JsonPathError(f"expected a path at column {column}")
    i, from_root = 0, False
    if text[0] in "$@":
        from_root, i = text[0] == "$", 1
    elif text[0] not in ".[":
        raise JsonPathError(f"unexpected {text[0]!r} at column {column}: a path starts with '.', '$' or '@'")
    steps: list[Any] = []
    while i < len(text):
        c = text[i]
        if text.startswith("..", i):
            name, i = _name(text, i + 2, column)
            if not name:
                raise JsonPathError(f"expected a field name after '..' at column {column + i}")
            steps.append(Recursive(name))
        elif c == ".":
            if i + 1 == len(text) and i == (1 if text[0] in "$@" else 0):
                break  # `{.}` or `{$.}`: the object itself
            name, i = _name(text, i + 1, column)
            if not name:
                raise JsonPathError(f"expected a field name after '.' at column {column + i}")
            steps.append(Wildcard() if name == "*" else Field(name))
        elif c == "[":
            close = _closing_bracket(text, i, column)
            steps.append(_subscript(text[i + 1 : close].strip(), column + i))
            i = close + 1
        else:
            raise JsonPathError(f"unexpected {c!r} at column {column + i} in path {text!r}")
    return Path(from_root, tuple(steps))


def _name(text: str, i: int, column: int) -> tuple[str, int]:
    """A field name from text[i] up to the next unescaped '.' or '['; `\\.` is a dot in the name."""
    out = []
    while i < len(text) and text[i] not in ".[":
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if c in " ,()]=!<>\"'":
            raise JsonPathError(f"unexpected {c!r} at column {column + i} in a field name")
        out.append(c)
        i += 1
    return "".join(out), i


def _closing_bracket(text: str, i: int, column: int) -> int:
    depth, j = 0, i
    while j < len(text):
        c = text[j]
        if c in "\"'":
            _, j = _quoted(text, j, column + j)
            continue
        if c in "[(":
            depth += 1
        elif c in "])":
            depth -= 1
            if depth == 0:
                if c != "]":
                    raise JsonPathError(f"unexpected ')' at column {column + j}")
                return j
        j += 1
    raise JsonPathError(f'unclosed "[" at column {column + i}')


def _subscript(inner: str, column: int) -> Any:
    if inner == "*":
        return Wildcard()
    if not inner:
        raise JsonPathError(f"empty [] at column {column}")
    if inner[0] in "\"'":
        name, used = _quoted(inner, 0, column + 1)
        if inner[used:].strip():
            raise JsonPathError(f"unions ([a, b]) are not supported: [{inner}] at column {column}")
        return Field(name)
    if inner.startswith("?"):
        body = inner[1:].strip()
        if not (body.startswith("(") and body.endswith(")")):
            raise JsonPathError(f"a filter is [?(...)]: [{inner}] at column {column}")
        return _filter(body[1:-1].strip(), column + inner.index("(") + 2)
    if "," in inner:
        raise JsonPathError(f"unions ([a, b]) are not supported: [{inner}] at column {column}")
    parts = [p.strip() for p in inner.split(":")]
    try:
        numbers = [int(p) if p else None for p in parts]
    except ValueError:
        numbers = []
    if not numbers or len(numbers) > 3 or (len(numbers) == 1 and numbers[0] is None):
        raise JsonPathError(
            f"bad subscript [{inner}] at column {column}: use [N], [a:b], [*], ['key'] or [?(@.x==\"y\")]"
        )
    if len(numbers) == 1:
        return Index(int(inner))
    start, stop, step = [*numbers, None][:3]
    if step == 0:
        raise JsonPathError(f"slice step 0 in [{inner}] at column {column}")
    return Slice(start, stop, step)


_OPS = ("==", "!=", "<=", ">=", "<", ">")


def _filter(cond: str, column: int) -> Filter:
    at = _operator(cond)
    if at is None:
        return Filter(_path(cond, column), None)
    i, op = at
    left, right = cond[:i].strip(), cond[i + len(op) :].strip()
    if not left or left[0] not in "@$":
        raise JsonPathError(f"a filter compares @.path with a value: ({cond}) at column {column}")
    return Filter(_path(left, column), op, _operand(right, column + i + len(op)))


def _operator(cond: str) -> tuple[int, str] | None:
    i = 0
    while i < len(cond):
        if cond[i] in "\"'":
            _, i = _quoted(cond, i, i)
            continue
        for op in _OPS:
            if cond.startswith(op, i):
                return i, op
        i += 1
    return None


def _operand(text: str, column: int) -> Any:
    if not text:
        raise JsonPathError(f"missing value after the operator at column {column}")
    if text[0] in "\"'":
        value, used = _quoted(text, 0, column)
        if used != len(text):
            raise JsonPathError(f"unexpected {text[used:]!r} after the string at column {column + used}")
        return value
    if text[0] in "@$":
        return _path(text, column)
    literals = {"true": True, "false": False, "null": None}
    if text in literals:
        return literals[text]
    try:
        return json.loads(text) if text[0] in "-0123456789" else _bad_operand(text, column)
    except ValueError:
        return _bad_operand(text, column)


def _bad_operand(text: str, column: int) -> Any:
    raise JsonPathError(f"bad value {text!r} at column {column}: a quoted string, a number, true, false or null")


# ---- evaluation -------------------------------------------------------------------------------
def render(template: Template, data: Any) -> str:
    """The template applied to `data` (JSON values): kubectl's text, without a trailing newline."""
    return "".join(_render(template.nodes, data, data))


def _render(nodes: tuple[Any, ...] | list[Any], current: Any, root: Any) -> Iterator[str]:
    for node in nodes:
        if isinstance(node, Text):
            yield node.text
        elif isinstance(node, Expr):
            yield " ".join(_text(v) for v in evaluate(node.path, current, root))
        else:
            for item in evaluate(node.path, current, root):
                yield from _render(node.body, item, root)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def evaluate(path: Path, current: Any, root: Any) -> list[Any]:
    """Every value the path selects (a missing key selects nothing)."""
    values = [root if path.from_root else current]
    for step in path.steps:
        values = [v for value in values for v in _step(step, value, root)]
    return values


def _step(step: Any, value: Any, root: Any) -> Iterator[Any]:
    if isinstance(step, Field):
        if isinstance(value, dict) and step.name in value:
            yield value[step.name]
    elif isinstance(step, Wildcard):
        if isinstance(value, dict):
            yield from value.values()
        elif isinstance(value, list):
            yield from value
    elif isinstance(step, Index):
        if isinstance(value, list) and -len(value) <= step.index < len(value):
            yield value[step.index]
    elif isinstance(step, Slice):
        if isinstance(value, list):
            yield from value[step.start : step.stop : step.step]
    elif isinstance(step, Recursive):
        yield from _descend(step.name, value)
    elif isinstance(step, Filter) and isinstance(value, list):
        yield from (item for item in value if _matches(step, item, root))


def _descend(name: str, value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        if name == "*":
            yield from value.values()
        elif name in value:
            yield value[name]
        for child in value.values():
            yield from _descend(name, child)
    elif isinstance(value, list):
        for child in value:
            if name == "*":
                yield child
            yield from _descend(name, child)


def _matches(f: Filter, item: Any, root: Any) -> bool:
    left = evaluate(f.left, item, root)
    if f.op is None:
        return bool(left) and left[0] not in (None, False, "", [], {})
    right = evaluate(f.right, item, root) if isinstance(f.right, Path) else [f.right]
    if not left or not right:
        return f.op == "!=" and bool(left) != bool(right)
    a, b = left[0], right[0]
    if f.op == "==":
        return _same(a, b)
    if f.op == "!=":
        return not _same(a, b)
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b))
    if not numbers and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[f.op])


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False
    return bool(a == b)


def sort_key(expression: str) -> Callable[[Any], tuple[int, Any]]:
    """kubectl's --sort-by: a key over one JSONPath expression (``.metadata.name`` or
    ``{.metadata.name}``). Numbers sort as numbers, strings as text (RFC 3339 timestamps sort in
    time order), other values by their JSON; an item where the path selects nothing sorts first.
    A template that is not one expression raises JsonPathError."""
    text = expression if expression.startswith("{") else "{" + expression + "}"
    nodes = parse(text).nodes
    if len(nodes) != 1 or not isinstance(nodes[0], Expr):
        raise JsonPathError(f"--sort-by needs one JSONPath expression such as '{{.metadata.name}}', not {expression!r}")
    path = nodes[0].path

    def key(item: Any) -> tuple[int, Any]:
        found = evaluate(path, item, item)
        if not found or found[0] is None:
            return (0, "")
        value = found[0]
        if isinstance(value, bool):  # before int: bool is an int in Python
            return (1, int(value))
        if isinstance(value, int | float):
            return (2, value)
        if isinstance(value, str):
            return (3, value)
        return (4, json.dumps(value, sort_keys=True))

    return key
