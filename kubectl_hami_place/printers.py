"""kubectl's machine-readable outputs, shared by the commands: -o json, -o yaml, -o jsonpath=TEMPLATE
and -o name. Tables are each command's own."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from kubectl_hami_place.options import jsonpath_of

STRUCTURED = ("json", "yaml")


def is_structured(output: str) -> bool:
    """-o json, yaml or jsonpath=...: what the command prints is a document, not a table."""
    return output in STRUCTURED or jsonpath_of(output) is not None


def structured_text(doc: Any, output: str) -> str:
    """`doc` as -o json (indented), yaml, or the jsonpath template's text (kubectl adds no newline)."""
    template = jsonpath_of(output)
    if template is not None:
        from kubectl_hami_place.jsonpath import parse, render

        return render(parse(template), doc)
    if output == "json":
        return json.dumps(doc, indent=2) + "\n"
    import yaml

    return str(yaml.safe_dump(doc, sort_keys=False))


def print_structured(doc: Any, output: str) -> None:
    click.echo(structured_text(doc, output), nl=False)


def object_name(resource: str, obj: dict[str, Any]) -> str:
    """`-o name`: kubectl's resource/name, e.g. hamipodplacement.scheduling.hami.placement.com/web-1a2b."""
    return f"{resource}/{(obj.get('metadata') or {}).get('name')}"


def sort_items(items: list[Any], expression: str | None, view: Callable[[Any], Any] = lambda o: o) -> list[Any]:
    """`items` ordered by --sort-by over `view(item)` (what -o json prints of it); a stable sort, so
    the command's own order breaks ties. A bad expression is a usage error (exit 2)."""
    if not expression:
        return items
    from kubectl_hami_place.jsonpath import JsonPathError, sort_key

    try:
        key = sort_key(expression)
    except JsonPathError as e:
        raise click.BadParameter(str(e), param_hint="'--sort-by'") from e
    return sorted(items, key=lambda o: key(view(o)))


def counted(n: int, noun: str) -> str:
    """`1 move`, `2 moves`, `0 GPUs`: a count and its noun, in English."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
