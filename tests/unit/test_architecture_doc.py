"""docs/architecture.md stays true: its state diagram is the transition table's, and it names every
module of the product packages and the harness (a new module must be placed in the map). Pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from release import architecture_diagram

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = (
    "hami_place_core",
    "hami_place_core/devices",
    "hami_place_core/kube",
    "hami_place_core/planning",
    "hami_place_core/planning/room",
    "hami_place_core/triggers",
    "kubectl_hami_place",
    "kubectl_hami_place/commands",
    "kubectl_hami_place/ops",
    "agent",
    "testbed",
    "testbed/controlplane",
    "testbed/hami",
    "testbed/data",
    "testbed/agents",
    "testbed/reference",
    "toolchain",
    "bench",
    "release",
)


def test_the_state_diagram_is_generated_from_the_transition_table() -> None:
    from hami_place_core.lifecycle import mermaid

    text = DOC.read_text()
    assert text == architecture_diagram.render(text), "docs/architecture.md's diagram is stale: run `make docs`"
    assert mermaid() in text


def _modules() -> list[tuple[str, str]]:
    out = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).glob("*.py")):
            if not f.name.startswith("__"):
                out.append((pkg, f.stem))
    return out


@pytest.mark.parametrize(("package", "module"), _modules())
def test_every_module_has_its_place_on_the_map(package: str, module: str) -> None:
    text = DOC.read_text()
    section = text.split(f"**`{package}/`", 1)
    assert len(section) == 2, f"docs/architecture.md has no paragraph for {package}/"
    paragraph = section[1].split("\n\n", 1)[0]
    assert f"`{module}" in paragraph, f"docs/architecture.md's {package}/ paragraph never names {module}.py"


def _contracts() -> list[tuple[str, dict[str, str]]]:
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    return [(s.split(":")[-1], dict(parser[s])) for s in parser.sections() if s.startswith("importlinter:contract:")]


def test_the_page_lists_every_import_contract_and_no_other() -> None:
    text = DOC.read_text()
    listed = text.split("The contracts, as `.importlinter` names them", 1)[1].split("\n\n", 2)[1]
    names = [line.removeprefix("  - ") for line in listed.splitlines()]
    assert names == [c["name"].replace("\n", " ") for _, c in _contracts()]


def test_the_planning_layers_are_the_same_in_the_package_docstring_and_the_contract() -> None:
    import re

    import hami_place_core.planning as planning

    contract = dict(_contracts())["planning-layers"]
    layers = contract["layers"].split()
    documented = re.findall(r"^- ``(\w+)``:", planning.__doc__ or "", re.M)
    assert documented == layers
