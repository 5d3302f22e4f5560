"""kubectl's machine-readable outputs, shared by the commands: -o json, -o yaml, -o jsonpath=TEMPLATE
and -o name. Tables are each command's own."""

from __future__ import annotations

import json
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
