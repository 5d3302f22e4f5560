"""Pure logic behind the plugin's commands: selectors, durations, placement manifests, progress
rendering and the SSE parser."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hami_place_core import placement as hp
from hami_place_core.selectors import SelectorError, format_selector, matches, parse_selector
from hami_place_core.targets import TargetError
from kubectl_hami_place.ops.follow import AgentRef, Reporter, _sse_views, describe
from kubectl_hami_place.ops.status import age
from kubectl_hami_place.options import Duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("app=web", {"matchLabels": {"app": "web"}}),
        ("app==web,tier=gpu", {"matchLabels": {"app": "web", "tier": "gpu"}}),
        ("app!=web", {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
        (
            "env in (prod, dev),gpu",
            {
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["dev", "prod"]},
                    {"key": "gpu", "operator": "Exists"},
                ]
            },
        ),
        ("!canary", {"matchExpressions": [{"key": "canary", "operator": "DoesNotExist"}]}),
        ("x notin (a)", {"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["a"]}]}),
    ],
)
def test_parse_selector(text: str, expected: dict[str, Any]) -> None:
    assert parse_selector(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty label selector"),
        ("a=b,a=c", "asks a to equal both"),
        ("a in ()", "lists no values"),
        ("a=(", "cannot parse"),
    ],
)
def test_bad_selectors_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_selector(text)


labels = st.dictionaries(st.sampled_from(["app", "tier", "env"]), st.sampled_from(["a", "b", "c"]), max_size=3)


@given(labels, labels)
def test_parsed_selectors_match_like_kubectl(selector_labels: dict[str, str], pod_labels: dict[str, str]) -> None:
    if not selector_labels:
        return
    text = ",".join(f"{k}={v}" for k, v in selector_labels.items())
    sel = parse_selector(text)
    assert matches(sel, pod_labels) == all(pod_labels.get(k) == v for k, v in selector_labels.items())
    assert parse_selector(format_selector(sel)) == sel


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("5m", 300), ("1h30m", 5400), ("250ms", 0.25)])
def test_durations(text: str, seconds: float) -> None:
    assert Duration().convert(text, None, None) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5x", "m", "1h30"])
def test_bad_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(click.BadParameter, match="is not a duration"):
        Duration().convert(text, None, None)


def test_age_is_kubectl_short() -> None:
    now = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
    assert age("2026-01-02T11:59:15Z", now) == "45s"
    assert age("2026-01-02T11:48:00Z", now) == "12m"
    assert age("2026-01-02T09:00:00Z", now) == "3h"
    assert age("2025-12-28T12:00:00Z", now) == "5d"
    assert age(None, now) == "?" and age("garbage", now) == "?"


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "labels": labels}}


def test_replacement_selector_uses_the_controller_and_pins_statefulset_identity() -> None:
    rs = {"kind": "ReplicaSet", "spec": {"selector": {"matchLabels": {"app": "web", "pod-template-hash": "5c8d"}}}}
    assert hp.replacement_selector(_pod("web-5c8d-x", {"app": "web"}), rs) == rs["spec"]["selector"]
    sts = {"kind": "StatefulSet", "spec": {"selector": {"matchLabels": {"app": "db"}}}}
    assert hp.replacement_selector(_pod("db-1", {"app": "db"}), sts) == {
        "matchLabels": {"app": "db", hp.STS_POD_NAME_LABEL: "db-1"}
    }
    assert sts["spec"]["selector"] == {"matchLabels": {"app": "db"}}  # the owner is not modified
    assert hp.replacement_selector(_pod("solo", {"app": "solo"}), None) == {"matchLabels": {"app": "solo"}}
    with pytest.raises(TargetError, match="no labels and no controller selector"):
        hp.replacement_selector(_pod("bare", {}), None)


def test_new_placement_is_the_crd_shape_and_checks_gpu_devices() -> None:
    obj = hp.new_placement(
        "ml", hp.placement_name("Trainer_X", "abc12"), "abc12", {"matchLabels": {"a": "b"}}, "n1", ["gpu-0/50"], "p-1"
    )
    assert obj["metadata"]["name"] == "trainer-x-abc12" and obj["kind"] == hp.KIND
    assert obj["spec"] == {
        "reqID": "abc12",
        "podSelector": {"matchLabels": {"a": "b"}},
        "nodeName": "n1",
        "gpuDevices": ["gpu-0/50"],
        "evictPod": "p-1",
    }
    with pytest.raises(TargetError, match="share one percentage"):
        hp.new_placement("ml", "x", "abc12", {"matchLabels": {"a": "b"}}, "n1", ["gpu-0/50", "gpu-1/25"])
    rid = hp.new_req_id()
    assert 5 <= len(rid) <= 63 and rid.isalnum()


def test_describe_and_reporter_print_each_change_once() -> None:
    assert describe({"phase": "Pending"}) == "Pending: waiting for a matching pod to be created"
    assert describe({"phase": "Pending", "reason": "WaitingForPDB", "message": "waiting: PDB x"}) == (
        "Pending (WaitingForPDB): waiting: PDB x"
    )
    out = io.StringIO()
    r = Reporter(out, tty=False)
    for view in ({"phase": "Pending"}, {"phase": "Pending"}, {"phase": "Completed", "message": "done"}):
        r.show(view)
    lines = out.getvalue().splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == [
        "Pending: waiting for a matching pod to be created",
        "Completed: done",
    ]
    assert lines[0][:4].isdigit() and lines[0][19] == "Z"  # timestamped for logs


class _FakeStream:
    def __init__(self, lines: list[bytes]) -> None:
        self.lines, self.paths = lines, []

    def stream(self, path: str, query: Any = None, read_timeout: float | None = None) -> Any:
        self.paths.append(path)
        return iter(self.lines)


def test_sse_parser_yields_views_and_keepalives_and_stops_on_delete() -> None:
    lines = [
        b": keep-alive",
        b"",
        b"event: placement",
        b'data: {"phase": "Pending"}',
        b"",
        b"event: placement",
        b'data: {"phase":',
        b'data: "Completed"}',
        b"",
    ]
    fake = _FakeStream(lines)
    views = list(_sse_views(fake, AgentRef(), "ml", "p", 5))  # type: ignore[arg-type]
    assert views == [{}, {"phase": "Pending"}, {"phase": "Completed"}]
    assert fake.paths == [
        "/api/v1/namespaces/kube-system/services/https:gpu-descheduler-webhook:proxy/proxy/api/v1/placements/ml/p/events"
    ]
    deleted = _FakeStream([b"event: deleted", b'data: {"name": "p"}', b""])
    with pytest.raises(Exception, match="was deleted"):
        list(_sse_views(deleted, AgentRef(), "ml", "p", 5))  # type: ignore[arg-type]


def test_reporter_on_a_tty_draws_a_spinner_line_and_clears_it() -> None:
    import time

    out = io.StringIO()
    with Reporter(out, tty=True) as r:
        r.show({"phase": "WaitingForPod", "reason": "Evicted", "message": "evicted; waiting"})
        time.sleep(0.35)
    text = out.getvalue()
    assert "WaitingForPod (Evicted): evicted; waiting\n" in text  # the permanent line
    assert any(f"\r\x1b[K{frame} WaitingForPod" in text for frame in Reporter.SPINNER)  # redrawn in place
    assert text.endswith("\r\x1b[K")  # nothing left on the terminal line after exit


def test_progress_stream_waits_for_the_agents_cache_but_not_for_a_missing_service() -> None:
    from hami_place_core.kube import errors as kube_errors
    from kubectl_hami_place.ops.follow import AgentRef, _sse_views_when_cached

    class FakeKube:
        def __init__(self, errors: list[Exception]) -> None:
            self.errors, self.calls = errors, 0

        def stream(self, path: str, read_timeout: float) -> Any:
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)
            return iter([b"event: placement", b'data: {"phase": "Completed"}', b""])

    lagging = FakeKube([kube_errors.NotFound("placement ns/p not found", status=404)] * 2)
    views = list(_sse_views_when_cached(lagging, AgentRef(), "ns", "p", 1.0))  # type: ignore[arg-type]
    assert views == [{"phase": "Completed"}] and lagging.calls == 3
    missing = FakeKube([kube_errors.NotFound('services "gpu-descheduler-webhook" not found', status=404)])
    with pytest.raises(kube_errors.NotFound, match="services"):
        list(_sse_views_when_cached(missing, AgentRef(), "ns", "p", 1.0))  # type: ignore[arg-type]
    assert missing.calls == 1
    never = FakeKube([kube_errors.NotFound("placement ns/p not found", status=404)] * 100)
    with pytest.raises(kube_errors.NotFound, match="placement"):
        list(_sse_views_when_cached(never, AgentRef(), "ns", "p", 1.0, grace=0.5))  # type: ignore[arg-type]
    assert 2 <= never.calls <= 5


def test_counts_read_as_english() -> None:
    """Issue 40: "1 moves", "1 GPUs" in plan, defrag and room lines."""
    from kubectl_hami_place.printers import counted

    assert [counted(n, "move") for n in (0, 1, 2)] == ["0 moves", "1 move", "2 moves"]
    assert counted(1, "GPU") == "1 GPU"


def test_the_agent_is_found_by_its_label() -> None:
    """Issue 40 item 4: any release name. The Service named, else the one the chart labels for
    progress, else the default name (also when Services may not be listed)."""
    from hami_place_core.kube import errors as kube_errors
    from kubectl_hami_place.ops.follow import DEFAULT_SERVICE, PROGRESS_LABEL, find_agent

    class Services:
        def __init__(self, names: list[str] | Exception) -> None:
            self.names, self.queries = names, []

        def request(self, method: str, path: str, query: dict[str, Any]) -> dict[str, Any]:
            self.queries.append((method, path, query))
            if isinstance(self.names, Exception):
                raise self.names
            return {"items": [{"metadata": {"name": n}} for n in self.names]}

    one = Services(["hami-place-webhook"])
    assert find_agent(one, "gpu", None).service == "hami-place-webhook"
    assert one.queries == [("GET", "/api/v1/namespaces/gpu/services", {"labelSelector": f"{PROGRESS_LABEL}=true"})]
    assert find_agent(Services(["x"]), "gpu", "named").service == "named"  # the flag wins, nothing listed
    assert find_agent(Services([]), "gpu", None).service == DEFAULT_SERVICE
    forbidden = Services(kube_errors.Forbidden("services is forbidden", status=403))
    assert find_agent(forbidden, "gpu", None).service == DEFAULT_SERVICE
    assert find_agent(Services(["b-release", "a-release"]), "gpu", None).service == "a-release"
