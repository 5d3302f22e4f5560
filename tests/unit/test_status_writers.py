"""Structure: agent/transitions.py is the only module of the agent that writes a placement's status,
and the old writers only observe."""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parents[2] / "agent"
WRITER = "transitions.py"
POLICY_WRITER = "policy_writer.py"
SURGE_WRITER = "surge.py"


def _status_writes(tree: ast.AST) -> list[str]:
    """What in a module looks like a status write: a placement path to the status subresource, a
    string naming it, or a PUT/PATCH of anything but the leader's Lease."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "status" and isinstance(node.value, ast.Constant):
            if node.value.value is True:
                found.append(f"line {node.value.lineno}: status=True (the status subresource)")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith("/status"):
            found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "request":
            method = node.args[0] if node.args else None
            if isinstance(method, ast.Constant) and method.value in ("PUT", "PATCH"):
                found.append(f"line {node.lineno}: {method.value}")
        elif isinstance(node, ast.Attribute) and node.attr in ("_write", "write_status"):
            found.append(f"line {node.lineno}: .{node.attr}")
    return found


def test_only_transitions_writes_status() -> None:
    writes = {
        path.name: found
        for path in sorted(AGENT.glob("*.py"))
        if (found := _status_writes(ast.parse(path.read_text(), str(path))))
    }
    leader = writes.pop("leader.py", [])
    assert all(w.endswith(": PUT") for w in leader), leader  # its Lease, not a placement
    writes.pop(POLICY_WRITER, None)  # a HamiDefragPolicy's status: see the test below
    surge = writes.pop(SURGE_WRITER, [])
    assert surge and all(w.endswith(": PATCH") for w in surge), surge  # scale, pod mark, finalizer: below
    events = writes.pop("events.py", [])
    assert all(w.endswith(": PATCH") for w in events), events  # an Event's count (aggregation), see below
    assert set(writes) == {WRITER}, writes


def test_the_event_recorder_patches_only_events() -> None:
    text = (AGENT / "events.py").read_text()
    assert text.count('"PATCH"') == 1 and 'f"/api/v1/namespaces/{ns}/events/{name}"' in text


def test_the_surge_patches_scale_a_pod_and_the_finalizer_never_a_status() -> None:
    """agent/surge.py PATCHes the scale subresource, the pod to remove and the placement's
    metadata (finalizers); the status of a surge move goes through transitions.py like any other."""
    text = (AGENT / SURGE_WRITER).read_text()
    tree = ast.parse(text)
    patches = [
        ast.unparse(n.args[1])
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "request"
        and n.args
        and isinstance(n.args[0], ast.Constant)
        and n.args[0].value == "PATCH"
    ]
    assert sorted(patches) == sorted(
        [
            "path",
            "f'/api/v1/namespaces/{p.namespace}/pods/{p.status.remove_pod}'",
            "hp.placement_path(p.namespace, p.name)",
        ]
    ), patches
    assert "status=True" not in text and '"status"' not in text


def test_the_autopilot_writes_only_its_policies_status() -> None:
    """agent/policy_writer.py writes HamiDefragPolicy status (its one PUT), never a placement's; the
    autopilot itself writes no status at all (it hands what it observed to the writer)."""
    tree = ast.parse((AGENT / POLICY_WRITER).read_text())
    status_paths = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and any(k.arg == "status" for k in n.keywords)
    ]
    assert status_paths == ["policy_path"], status_paths
    puts = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "request"
        and n.args
        and isinstance(n.args[0], ast.Constant)
        and n.args[0].value in ("PUT", "PATCH")
    ]
    assert len(puts) == 1 and "policy_path" in ast.unparse(puts[0]), [ast.unparse(p) for p in puts]
    assert _status_writes(ast.parse((AGENT / "autopilot.py").read_text())) == []


def test_the_checker_sees_a_status_write() -> None:
    sneaky = 'async def f(kube, p):\n    await kube.request("PUT", placement_path(p.namespace, p.name, status=True))\n'
    assert len(_status_writes(ast.parse(sneaky))) == 2


def test_the_old_writers_call_the_transitions() -> None:
    for name in ("mutate.py", "controller.py", "mover.py"):
        source = (AGENT / name).read_text()
        assert "transitions.apply(" in source, name
        assert "merge_conditions" not in source and '"phase":' not in source, name
