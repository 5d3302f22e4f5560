"""kubectl's output flags on `status` and `policies`: -o json/yaml as kubectl prints a list, -o name,
-o jsonpath=TEMPLATE and --no-headers; and -o jsonpath on the object pin/move print. The commands
run against an in-memory stand-in for the API server (no cluster); the renderers are also
checked on their own, with hand-written objects."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from hami_place_core import placement as hp
from kubectl_hami_place import kube as kube_module
from kubectl_hami_place.cli import cli
from kubectl_hami_place.ops import policies as policies_cmd
from kubectl_hami_place.ops import status as status_cmd
from kubectl_hami_place.ops.placements import _announce


def placement(name: str, phase: str | None, node: str = "gpu-node-2") -> dict[str, Any]:
    obj = hp.new_placement("ml", name, f"req-{name}", {"matchLabels": {"app": name}}, node, ["gpu-0/50", "gpu-1/50"])
    # a list's items, as the API server returns them: no apiVersion or kind of their own
    del obj["apiVersion"], obj["kind"]
    obj["metadata"].update(creationTimestamp="2026-12-06T11:59:00Z", resourceVersion="7")
    if phase:
        obj["status"] = {"phase": phase, "reason": "Bound" if phase == "Completed" else None}
    return obj


def policy(name: str, state: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiDefragPolicy",
        "metadata": {"name": name, "resourceVersion": "3"},
        "spec": {"mode": "DryRun"},
        "status": {"state": state, "plan": {"moves": [{"pod": "ml/a"}], "gpusFreed": 1}},
    }


PLACEMENTS = [placement("web-2", "Completed"), placement("web-1", None)]
POLICIES = [policy("night", "Idle"), policy("day", "Blocked")]


class FakeKube:
    """What the commands ask of kubectl_hami_place.kube.Kube: a namespace and one LIST."""

    def __init__(self, *args: Any) -> None:
        pass

    def effective_namespace(self) -> str:
        return "ml"

    def request(self, method: str, path: str, query: dict[str, Any] | None = None) -> dict[str, Any]:
        items = POLICIES if "hamidefragpolicies" in path else PLACEMENTS
        wanted = ((query or {}).get("fieldSelector") or "").removeprefix("metadata.name=")
        return {
            "metadata": {"resourceVersion": "9"},
            "items": [o for o in items if not wanted or o["metadata"]["name"] == wanted],
        }


@pytest.fixture
def run(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(kube_module, "Kube", FakeKube)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(cli, list(args), terminal_width=160)

    return invoke


def ok(result: Result) -> str:
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


# ---- status -----------------------------------------------------------------------------------
def test_status_json_is_a_kubernetes_list_of_the_objects(run: Any) -> None:
    doc = json.loads(ok(run("status", "-o", "json")))
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List") and "count" not in doc
    assert [o["metadata"]["name"] for o in doc["items"]] == ["web-1", "web-2"]
    first = doc["items"][0]
    assert list(first)[:2] == ["apiVersion", "kind"]  # filled in, as kubectl does for a list's items
    assert (first["apiVersion"], first["kind"]) == ("scheduling.hami.placement.com/v1", "HamiPodPlacement")
    assert doc["items"][1]["status"]["phase"] == "Completed" and first["spec"]["gpuDevices"] == ["gpu-0/50", "gpu-1/50"]
    as_yaml = yaml.safe_load(ok(run("status", "-o", "yaml")))
    assert as_yaml == doc


def test_status_name_and_jsonpath(run: Any) -> None:
    assert ok(run("status", "-o", "name")).splitlines() == [
        "hamipodplacement.scheduling.hami.placement.com/web-1",
        "hamipodplacement.scheduling.hami.placement.com/web-2",
    ]
    assert ok(run("status", "-A", "-o", "name")).startswith("hamipodplacement.scheduling.hami.placement.com/web-1\n")
    template = 'jsonpath={range .items[*]}{.metadata.name}={.status.phase}{"\\n"}{end}'
    assert ok(run("status", "-o", template)) == "web-1=\nweb-2=Completed\n"
    assert ok(run("status", "-o", "jsonpath={.items[*].metadata.name}")) == "web-1 web-2"  # no newline, as kubectl


def test_status_no_headers(run: Any) -> None:
    table = ok(run("status")).splitlines()
    bare = ok(run("status", "--no-headers")).splitlines()
    assert table[0].split()[:2] == ["NAME", "PHASE"] and len(table) == 3
    assert [line.split()[0] for line in bare] == ["web-1", "web-2"]
    assert ok(run("status", "-o", "wide", "--no-headers")).splitlines()[0].split()[-1] == "req-web-1"


def test_status_bad_output_is_a_usage_error(run: Any) -> None:
    bad = run("status", "-o", "jsonpath={.items[?(@.status.phase=Failed)]}")
    assert bad.exit_code == 2 and "jsonpath template" in bad.stderr and "column" in bad.stderr
    assert run("status", "-o", "summary").exit_code == 2


def test_status_renderers_on_their_own() -> None:
    objs = [{"apiVersion": hp.API_VERSION, "kind": hp.KIND, **o} for o in PLACEMENTS]
    assert status_cmd.as_list(objs)["items"] == objs
    assert status_cmd.names(objs[:1]) == "hamipodplacement.scheduling.hami.placement.com/web-2"
    assert not status_cmd.table(objs, False, False, no_headers=True).startswith("NAME")
    assert status_cmd.table(objs, False, True).split()[:2] == ["NAMESPACE", "NAME"]
    # -w: the object on one line (json), its name, a row with or without the header
    obj = objs[0]
    assert json.loads(status_cmd.watch_line(obj, "json", False, False, True)) == obj
    assert status_cmd.watch_line(obj, "yaml", False, False, True).startswith("---\napiVersion: ")
    assert status_cmd.watch_line(obj, "name", False, False, True).endswith("/web-2")
    assert status_cmd.watch_line(obj, "jsonpath={.status.phase}", False, False, True) == "Completed"
    assert status_cmd.watch_line(obj, "table", False, False, True).startswith("NAME")
    assert status_cmd.watch_line(obj, "table", False, False, False).startswith("web-2")


# ---- policies ---------------------------------------------------------------------------------
def test_policies_name_jsonpath_and_no_headers(run: Any) -> None:
    assert ok(run("policies", "-o", "name")).splitlines() == [
        "hamidefragpolicy.scheduling.hami.placement.com/day",
        "hamidefragpolicy.scheduling.hami.placement.com/night",
    ]
    assert ok(run("policies", "night", "-o", "name")) == "hamidefragpolicy.scheduling.hami.placement.com/night\n"
    assert ok(run("policies", "-o", 'jsonpath={.items[?(@.state=="Blocked")].name}')) == "day"
    assert ok(run("policies", "night", "-o", "jsonpath={.plan}")) == "1 move free 1 GPU"
    table = ok(run("policies")).splitlines()
    bare = ok(run("policies", "--no-headers")).splitlines()
    assert table[0].split()[:3] == ["NAME", "MODE", "STATE"]
    assert [line.split() for line in bare] == [line.split() for line in table[1:]]
    assert [line.split()[0] for line in bare] == ["day", "night"]
    doc = json.loads(ok(run("policies", "-o", "json")))
    assert doc["count"] == 2 and doc["items"][0]["name"] == "day"  # the flat view is unchanged


def test_policies_renderers_on_their_own() -> None:
    assert policies_cmd.names(POLICIES) == (
        "hamidefragpolicy.scheduling.hami.placement.com/night\nhamidefragpolicy.scheduling.hami.placement.com/day"
    )
    assert policies_cmd.table(POLICIES, False).startswith("NAME")
    assert policies_cmd.table(POLICIES, True, no_headers=True).split()[0] == "night"


# ---- pin / move / evict: the object they print ---------------------------------------------------
def test_pin_and_move_print_their_placement_through_jsonpath(capsys: pytest.CaptureFixture[str]) -> None:
    obj = hp.new_placement("ml", "web-abc", "req-1", {"matchLabels": {"app": "web"}}, "gpu-node-2", ["gpu-1"])
    _announce(obj, "pins deploy/web", "gpu-1", "client", "jsonpath={.spec.nodeName}/{.spec.gpuDevices[0]}")
    assert capsys.readouterr().out == "gpu-node-2/gpu-1"
    _announce(obj, "pins deploy/web", "gpu-1", "client", "json")
    assert json.loads(capsys.readouterr().out) == obj
    _announce(obj, "pins deploy/web", "gpu-1", None, "name")  # kubectl create -o name
    assert capsys.readouterr().out == "hamipodplacement.scheduling.hami.placement.com/web-abc\n"


def test_pin_move_and_evict_take_o_name_and_the_list_commands_sort_by() -> None:
    import click

    from kubectl_hami_place.cli import cli as root

    def params(name: str) -> dict[str, click.Parameter]:
        command = root.get_command(click.Context(root), name)  # the commands load lazily
        assert command is not None, name
        return {p.name or "": p for p in command.params}

    for name in ("pin", "move", "evict"):
        assert "name" in params(name)["output"].type.choices, name  # type: ignore[attr-defined]
    for name in ("status", "policies"):
        assert "sort_by" in params(name), name


# ---- --sort-by ----------------------------------------------------------------------------------
def test_status_sort_by_a_field_items_without_it_first(run: Any) -> None:
    assert ok(run("status", "--sort-by=.status.phase", "-o", "name")).splitlines() == [
        "hamipodplacement.scheduling.hami.placement.com/web-1",  # no status: first, as kubectl
        "hamipodplacement.scheduling.hami.placement.com/web-2",
    ]
    by_req = ok(run("status", "--sort-by", "{.spec.reqID}", "--no-headers")).splitlines()
    assert [line.split()[0] for line in by_req] == ["web-1", "web-2"]
    listed = json.loads(ok(run("status", "--sort-by=.metadata.name", "-o", "json")))
    assert [o["metadata"]["name"] for o in listed["items"]] == ["web-1", "web-2"]


def test_policies_sort_by_numbers_as_numbers_over_what_json_prints(run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    three = [policy("a", "Idle"), policy("b", "Idle"), policy("c", "Idle")]
    for p, done in zip(three, (10, 2, 33), strict=True):
        p["status"]["movesSucceeded"] = done
    monkeypatch.setitem(globals(), "POLICIES", three)
    rows = ok(run("policies", "--sort-by=.movesSucceeded", "--no-headers")).splitlines()
    assert [r.split()[0] for r in rows] == ["b", "a", "c"]  # 2 < 10 < 33, not "10" < "2"


def test_sort_by_that_is_not_one_expression_is_a_usage_error(run: Any) -> None:
    for bad in ("{.a}{.b}", "{.items[?(@.x==}"):
        result = run("status", "--sort-by", bad)
        assert result.exit_code == 2, result.output
        assert "--sort-by" in result.output and "Traceback" not in result.output


def test_sort_key_orders_like_kubectl() -> None:
    from kubectl_hami_place.jsonpath import sort_key

    items = [
        {"t": "2026-12-06T12:00:00Z", "n": 10},
        {"n": 2},
        {"t": "2026-12-06T11:59:59Z", "n": 2.5},
        {"t": None, "n": -1},
    ]
    assert [i.get("n") for i in sorted(items, key=sort_key(".n"))] == [-1, 2, 2.5, 10]
    assert [i.get("n") for i in sorted(items, key=sort_key("{.t}"))] == [2, -1, 2.5, 10]  # missing/null first
