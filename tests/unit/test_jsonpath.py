"""`-o jsonpath=TEMPLATE`: kubectl's JSONPath subset (kubectl_hami_place/jsonpath.py), what it prints
and the position it names for a template that does not parse. Pure."""

from __future__ import annotations

from typing import Any

import click
import pytest

from kubectl_hami_place.jsonpath import JsonPathError, parse, render
from kubectl_hami_place.options import OutputFormat, jsonpath_of

LIST: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "List",
    "items": [
        {
            "metadata": {"name": "web-1", "labels": {"app.kubernetes.io/name": "web"}},
            "spec": {"gpuDevices": ["gpu-0", "gpu-1/50"]},
            "status": {"phase": "Failed", "attempts": 3, "ready": False},
        },
        {
            "metadata": {"name": "web-2"},
            "spec": {"gpuDevices": []},
            "status": {"phase": "Completed", "attempts": 1.5, "ready": True},
        },
    ],
}


def jp(template: str, data: Any = LIST) -> str:
    return render(parse(template), data)


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{.kind}", "List"),
        ("{.items[*].metadata.name}", "web-1 web-2"),
        ("{.items[0].metadata.name}", "web-1"),
        ("{.items[-1].metadata.name}", "web-2"),
        ("{.items[1:].metadata.name}", "web-2"),
        ("{.items[::-1].metadata.name}", "web-2 web-1"),
        ("{.items[5].metadata.name}", ""),  # out of range: nothing, as a missing key
        ("{.items[0].nothing.here}", ""),
        ("names: {.items[*].metadata.name}!", "names: web-1 web-2!"),
        ('{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}', "web-1\tFailed\nweb-2\tCompleted\n"),
        ("{range .items[*]}[{range .spec.gpuDevices[*]}<{@}>{end}]{end}", "[<gpu-0><gpu-1/50>][]"),
        ("{range .items[*]}{$.kind}/{.metadata.name} {end}", "List/web-1 List/web-2 "),
        ('{.items[?(@.status.phase=="Failed")].metadata.name}', "web-1"),
        ("{.items[?(@.status.phase!='Failed')].metadata.name}", "web-2"),
        ("{.items[?(@.status.attempts > 2)].metadata.name}", "web-1"),
        ("{.items[?(@.status.attempts<=1.5)].metadata.name}", "web-2"),
        ("{.items[?(@.status.ready==true)].metadata.name}", "web-2"),
        ("{.items[?(@.metadata.labels)].metadata.name}", "web-1"),
        ("{.items[0].metadata.labels.app\\.kubernetes\\.io/name}", "web"),
        ("{.items[0].metadata.labels['app.kubernetes.io/name']}", "web"),
        ("{..phase}", "Failed Completed"),
        ("{.items[0].metadata.*}", 'web-1 {"app.kubernetes.io/name":"web"}'),
        ("{.items[*].status.attempts}", "3 1.5"),
        ("{.items[*].status.ready}", "false true"),
        ("{.items[0].spec}", '{"gpuDevices":["gpu-0","gpu-1/50"]}'),
        ("{.items[0].spec.gpuDevices}", '["gpu-0","gpu-1/50"]'),
        ("{ .kind }", "List"),
        ("{$.kind}{@.apiVersion}", "Listv1"),
        ("plain text, no braces", "plain text, no braces"),
        ('{"}{"}', "}{"),
    ],
)
def test_templates_print_what_kubectl_prints(template: str, expected: str) -> None:
    assert jp(template) == expected


def test_the_whole_object_and_null() -> None:
    assert jp("{.}", {"a": [1, None]}) == '{"a":[1,null]}'
    assert jp("{.a}", {"a": None}) == ""


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("", "no template given"),
        ("{", 'unclosed "{" at column 1'),
        ("ok {.a", 'unclosed "{" at column 4'),
        ("{.items[*.name}", 'unclosed "[" at column 8'),
        ("{range .items[*]}{.a}", "{range} at column 1 has no {end}"),
        ("{.a}{end}", "{end} at column 5 closes no {range}"),
        ("{range}{end}", "{range} at column 1 needs a path"),
        ("{}", "empty expression {} at column 1"),
        ("{items}", "unexpected 'i' at column 2: a path starts with '.', '$' or '@'"),
        ("{.items[x]}", "bad subscript [x] at column 8"),
        ("{.a[1,2]}", "unions ([a, b]) are not supported"),
        ("{.a[::0]}", "slice step 0"),
        ('{"abc}', "unterminated string"),
        ('{"\\q"}', "unknown escape \\q"),
        ("{.a b}", "unexpected ' ' at column 4"),
        ("{.a.}", "expected a field name after '.'"),
        ("{.a{.b}}", 'unexpected "{" at column 4'),
        ("{.a[?(@.x==foo)]}", "bad value 'foo'"),
        ("{.a[?@.x]}", "a filter is [?(...)]"),
    ],
)
def test_bad_templates_name_the_fault_and_its_column(template: str, message: str) -> None:
    with pytest.raises(JsonPathError) as err:
        parse(template)
    assert message in str(err.value)


def test_the_output_option_checks_the_template_as_a_usage_error() -> None:
    kind = OutputFormat(("table", "json"))
    assert kind.convert("jsonpath={.kind}", None, None) == "jsonpath={.kind}"
    assert jsonpath_of("jsonpath={.kind}") == "{.kind}" and jsonpath_of("json") is None
    assert kind.convert("json", None, None) == "json"
    with pytest.raises(click.BadParameter, match=r"jsonpath template '\{\.a\[': unclosed \"\{\" at column 1"):
        kind.convert("jsonpath={.a[", None, None)
    with pytest.raises(click.BadParameter, match="jsonpath needs a template"):
        kind.convert("jsonpath", None, None)
    with pytest.raises(click.BadParameter, match="'name' is not one of"):
        kind.convert("name", None, None)
