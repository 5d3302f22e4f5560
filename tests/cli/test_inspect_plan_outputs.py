"""kubectl parity and readable output for `inspect` and `plan`, on snapshots (no cluster): natural
node order, labelled heatmap rows, -o summary, --no-headers, -o jsonpath, the plan document's
apiVersion/kind, --max-rows and the progress line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from hami_place_core.fragmentation import cluster_metrics, mix_from_state
from hami_place_core.snapshot import make_snapshot
from hami_place_core.state import build_state
from kubectl_hami_place.cli import cli
from kubectl_hami_place.ops import progress
from kubectl_hami_place.ops.render import heatmap, natural_sorted, range_label
from tests.planner_fixtures import node, pod

NATURAL = ["gpu-node-1", "gpu-node-2", "gpu-node-9", "gpu-node-10", "gpu-node-11"]


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), terminal_width=160)


def ok(*args: str) -> str:
    result = invoke(*args)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.stdout


def write_snapshot(path: Path, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> str:
    state = build_state(nodes, pods)
    path.write_text(json.dumps(make_snapshot(nodes, pods, state, cluster_metrics(state, mix_from_state(state)), "t")))
    return str(path)


@pytest.fixture
def numbered(tmp_path: Path) -> str:
    """Five nodes whose names sort differently as text (gpu-node-1, -10, -11, -2, -9) and by number."""
    nodes = [node(n, 2) for n in ("gpu-node-10", "gpu-node-2", "gpu-node-11", "gpu-node-1", "gpu-node-9")]
    pods = [pod("a", "gpu-node-2", (0,), 40), pod("b", "gpu-node-10", (1,), 100), pod("c", "gpu-node-9", (0,), 30)]
    return write_snapshot(tmp_path / "numbered.json", nodes, pods)


# ---- natural order --------------------------------------------------------------------------
def test_natural_sort_puts_2_before_10() -> None:
    assert natural_sorted(["gpu-node-10", "gpu-node-2", "gpu-node-1", "a100-3", "gpu-node-11", "gpu-node-9"]) == [
        "a100-3",
        *NATURAL,
    ]
    assert natural_sorted(["n-1", "n-01", "n-001", "n-0"]) == ["n-0", "n-001", "n-01", "n-1"]  # ties: as text
    assert natural_sorted(["node-b2", "node-a10", "node-a9"]) == ["node-a9", "node-a10", "node-b2"]


def test_inspect_tables_and_summary_list_nodes_in_natural_order(numbered: str) -> None:
    out = ok("inspect", "--snapshot", numbered)
    assert re.findall(r"^NODE (\S+)", out, re.M) == NATURAL
    summary = ok("inspect", "--snapshot", numbered, "-o", "summary")
    assert [line.split()[0] for line in summary.splitlines()[1:]] == NATURAL
    # named nodes keep the order given, as `kubectl get nodes b a` does
    out = ok("inspect", "--snapshot", numbered, "gpu-node-10", "gpu-node-2")
    assert re.findall(r"^NODE (\S+)", out, re.M) == ["gpu-node-10", "gpu-node-2"]


# ---- -o summary and --no-headers --------------------------------------------------------------
def test_summary_is_one_line_per_node_with_its_metrics(numbered: str) -> None:
    lines = ok("inspect", "--snapshot", numbered, "-o", "summary").splitlines()
    assert lines[0].split() == ["NODE", "STATUS", "GPUS", "WHOLE-FREE", "IN-USE", "FREE", "STRANDED", "FGD"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert len(lines) == 6 and "CLUSTER" not in "\n".join(lines)
    assert rows["gpu-node-1"][:5] == ["Ready", "2", "2", "0", "2.00"]
    assert rows["gpu-node-10"][:5] == ["Ready", "2", "1", "1", "1.00"]
    assert rows["gpu-node-2"][:5] == ["Ready", "2", "1", "1", "1.60"]
    assert all(len(r) == 7 for r in rows.values())  # one word per cell: awk-able


def test_summary_of_the_1213_node_example_fits_one_line_per_node() -> None:
    lines = ok("inspect", "--snapshot", "example", "-o", "summary", "--no-headers").splitlines()
    assert len(lines) == 1213 and lines[0].startswith("openb-node-0000 ")
    assert sum(int(line.split()[3]) for line in lines) == 736  # WHOLE-FREE adds up to the cluster's


def test_no_headers_drops_the_column_headers_only(numbered: str) -> None:
    table = ok("inspect", "--snapshot", numbered, "gpu-node-2")
    bare = ok("inspect", "--snapshot", numbered, "gpu-node-2", "--no-headers")
    assert "GPU    MODEL" in table and "MODEL" not in bare
    assert bare.startswith("NODE gpu-node-2  Ready")  # the node's own line stays: it is data
    assert len(re.findall(r"^\d+\s+NVIDIA A100", bare, re.M)) == 2
    wide = ok("inspect", "--snapshot", numbered, "gpu-node-2", "-o", "wide", "--no-headers")
    assert "UUID" not in wide and "GPU-" in wide
    summary = ok("inspect", "--snapshot", numbered, "-o", "summary", "--no-headers").splitlines()
    assert [line.split()[0] for line in summary] == NATURAL


def test_heatmap_and_summary_are_two_views() -> None:
    result = invoke("inspect", "--snapshot", "example", "--heatmap", "-o", "summary")
    assert result.exit_code == 2 and "--heatmap and -o summary" in result.stderr


# ---- heatmap ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("first", "last", "label"),
    [
        ("gpu-node-1", "gpu-node-1", "gpu-node-1"),
        ("gpu-node-1", "gpu-node-8", "gpu-node-1..8"),
        ("gpu-node-9", "gpu-node-16", "gpu-node-9..16"),
        ("gpu-node-10", "gpu-node-19", "gpu-node-10..19"),
        ("openb-node-0000", "openb-node-0025", "openb-node-0000..0025"),
        ("a100-1", "h100-4", "a100-1..h100-4"),
        ("gpu", "gpu-2", "gpu..gpu-2"),
        ("ip-10-0-1-7.internal", "ip-10-0-11-7.internal", "ip-10-0-1-7.internal..ip-10-0-11-7.internal"),
    ],
)
def test_range_labels(first: str, last: str, label: str) -> None:
    assert range_label(first, last) == label


def test_every_heatmap_row_names_all_its_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    lines = ok("inspect", "--snapshot", "example", "--heatmap").splitlines()
    body = lines[: lines.index("")]
    assert "a line's label names its nodes, first..last" in lines[-2] and "first node" not in lines[-2]
    expected_next = 0
    for line in body:
        m = re.match(r"openb-node-(\d{4})(?:\.\.(\d{4}))?\s\s", line)
        assert m, line
        first, last = int(m.group(1)), int(m.group(2) or m.group(1))
        assert first == expected_next, line  # rows are contiguous: no node unlabelled
        expected_next = last + 1
    assert expected_next == 1213


def test_heatmap_rows_follow_natural_order(numbered: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "24")  # one 2-GPU block per line after a label column
    lines = ok("inspect", "--snapshot", numbered, "--heatmap").splitlines()
    body = lines[: lines.index("")]
    labels = [line.split()[0] for line in body]
    starts = [label.split("..")[0] for label in labels]
    assert starts == sorted(starts, key=NATURAL.index) and starts[0] == "gpu-node-1"
    assert labels[-1].endswith(("11", "gpu-node-11"))


def test_labels_too_long_for_a_column_go_above_their_line() -> None:
    names = [f"ip-10-0-{i}-7.eu-central-1.compute.internal" for i in range(1, 13)]
    state = build_state([node(n, 4) for n in names], [])
    text = heatmap(state, cluster_metrics(state, mix_from_state(state)), names, color=False, width=60)
    body = text.split("\n\n")[0].splitlines()
    assert body[0] == "ip-10-0-1-7.eu-central-1.compute.internal..ip-10-0-11-7.eu-central-1.compute.internal"
    assert body[1] == "  " + " ".join(["····"] * 11) and len(body[1]) <= 60
    assert body[2:] == ["ip-10-0-12-7.eu-central-1.compute.internal", "  ····"]


# ---- -o jsonpath ------------------------------------------------------------------------------
def test_inspect_jsonpath_reads_the_snapshot_document() -> None:
    assert ok("inspect", "--snapshot", "example", "-o", "jsonpath={.summary.cluster.wholeFree}") == "736"
    names = ok("inspect", "--snapshot", "example", "openb-node-0050", "-o", "jsonpath={.nodes[*].metadata.name}")
    assert names == "openb-node-0050"


@pytest.mark.parametrize("command", ["inspect", "plan"])
def test_a_bad_jsonpath_template_is_a_usage_error(command: str) -> None:
    result = invoke(command, "--snapshot", "example", "-o", "jsonpath={.items[*.name}")
    assert result.exit_code == 2 and result.stdout == ""
    assert "jsonpath template '{.items[*.name}': unclosed \"[\" at column 8" in result.stderr


# ---- plan: the document, jsonpath, --max-rows, progress ----------------------------------------
def test_plan_json_has_apiversion_and_kind_and_keeps_its_keys() -> None:
    doc = json.loads(ok("plan", "--snapshot", "example", "--max-moves", "3", "-o", "json"))
    assert list(doc)[:3] == ["apiVersion", "kind", "source"]
    assert (doc["apiVersion"], doc["kind"]) == ("scheduling.hami.placement.com/v1", "HamiPlacementPlan")
    assert {"objective", "moves", "before", "after", "gpusFreed", "solver"} <= set(doc)
    room = json.loads(ok("plan", "--snapshot", "example", "--for-request", "gpus=8", "-o", "json"))
    assert (room["apiVersion"], room["kind"]) == ("scheduling.hami.placement.com/v1", "HamiRoomPlan")
    assert "request" in room and "source" in room


def test_plan_jsonpath() -> None:
    template = 'jsonpath={.kind}:{range .moves[*]}{.pod}{" "}{end}'
    out = ok("plan", "--snapshot", "example", "--max-moves", "3", "-o", template)
    kind, pods = out.split(":")
    assert kind == "HamiPlacementPlan" and len(pods.split()) == 3 and pods.startswith("openb/openb-pod-")


def test_max_rows_says_how_many_moves_it_leaves_out() -> None:
    full = ok("plan", "--snapshot", "example", "--max-moves", "30")
    cut = ok("plan", "--snapshot", "example", "--max-moves", "30", "--max-rows", "7")
    numbers = [int(line.split()[0]) for line in cut.splitlines() if re.match(r"^\d+\s+openb/", line)]
    assert numbers == [1, 2, 3, 4, 28, 29, 30]
    lines = cut.splitlines()
    i = lines.index("… 23 more moves (5 to 27; -o json lists every move) …")
    assert lines[i - 1].startswith("4 ") and lines[i + 1].startswith("28 ")
    assert "more moves" not in full and len(full.splitlines()) == len(cut.splitlines()) + 23 - 1
    assert cut.splitlines()[0] == full.splitlines()[0] and "whole GPUs free" in cut and "planned in" in cut
    assert "more moves" not in ok("plan", "--snapshot", "example", "--max-moves", "5", "--max-rows", "5")
    assert invoke("plan", "--snapshot", "example", "--max-rows", "1").exit_code == 2


def test_plan_shows_progress_on_a_terminal_stderr_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "INTERVAL", 0.01)
    quiet = invoke("plan", "--snapshot", "example", "--max-moves", "3", "-o", "json")  # stderr is no terminal
    assert quiet.exit_code == 0 and quiet.stderr == ""
    monkeypatch.setattr(progress, "interactive", lambda stream: True)
    result = invoke("plan", "--snapshot", "example", "--max-moves", "3", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["kind"] == "HamiPlacementPlan"  # stdout untouched
    err = result.stderr
    assert re.search(r"\r[-\\|/] (reading the snapshot|planning) \d+s", err), repr(err[:200])
    assert err.endswith("\r") and err.rsplit("\r", 2)[-2].strip() == ""  # erased before the output


def test_inspect_says_the_free_nodes_and_the_room_for_k_gpu_pods(tmp_path: Path) -> None:
    """Issue 36: what a waiting multi-GPU job looks for, in the CLUSTER table; on the example the
    hand count of the issue (168 free nodes; room for 56, 117 and 352 pods of 8, 4 and 2 GPUs)."""
    out = ok("inspect", "--snapshot", "example")
    assert "completely free nodes                       168" in out
    assert "room for pods of k GPUs                     8: 56, 4: 117, 2: 352, 1: 736 (the running mix)" in out
    # Only the nodes asked for: one node of 4 GPUs, one of them used by a 1-GPU pod.
    snap = write_snapshot(tmp_path / "s.json", [node("a", 4), node("b", 2)], [pod("p", "a", (0,), 100)])
    one = ok("inspect", "a", "--snapshot", snap)
    assert "completely free nodes                       0" in one
    assert "room for pods of k GPUs                     1: 3 (the running mix)" in one
