"""HamiDefragPolicy as the autopilot reads it (hami_place_core/defrag_policy.py)."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from hami_place_core.defrag_policy import (
    Budgets,
    PolicyError,
    RecentMove,
    budget_wait,
    cooling_pods,
    parse_policy,
    recent_moves,
)

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
BASE: dict[str, Any] = {
    "metadata": {"name": "p", "generation": 3},
    "spec": {"triggers": {"pendingPods": {"after": "2m"}}, "selector": {"namespaces": ["ml"]}},
}


def policy(**spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BASE)
    obj["spec"].update(spec)
    return obj


def test_defaults_match_the_crd() -> None:
    p = parse_policy(BASE)
    crd = yaml.safe_load((REPO / "crds" / "hamidefragpolicies.scheduling.hami.placement.com.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    budgets = spec["budgets"]["properties"]
    assert p.budgets == Budgets(
        budgets["movesPerRun"]["default"],
        budgets["movesPerHour"]["default"],
        budgets["movesPerNode"]["default"],
        budgets["movesPerWorkload"]["default"],
    )
    assert p.mode == spec["mode"]["default"] == "DryRun"
    assert p.min_interval == 300.0 and spec["minInterval"]["default"] == "5m"
    assert p.move_strategy == spec["moveStrategy"]["default"] == "Evict"
    assert spec["moveStrategy"]["enum"] == ["Evict", "Surge", "Auto"]
    assert parse_policy(policy(moveStrategy="Auto")).move_strategy == "Auto"
    assert p.pending_after == 120.0 and p.free_below is None and p.window is None and p.generation == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"triggers": {}}, "spec.triggers must set pendingPods or freeGPUs"),
        ({"selector": {}}, "an empty selector would let the autopilot move any pod"),
        ({"budgets": {"movesPerHour": -1}}, "spec.budgets.movesPerHour must be at least 0, got -1"),
        ({"budgets": {"movesPerRun": "5"}}, "spec.budgets.movesPerRun must be an integer"),
        ({"window": {"schedule": "0 0 30 2 *", "duration": "1h"}}, "spec.window: cron '0 0 30 2 \\*' never fires"),
        ({"window": {"schedule": "0 2 * * *", "duration": "1h", "timeZone": "Nowhere/X"}}, "unknown time zone"),
        ({"minInterval": "soon"}, "spec.minInterval: 'soon' is not a duration"),
        ({"mode": "Yolo"}, "spec.mode must be DryRun or Apply"),
        ({"moveStrategy": "surge"}, "spec.moveStrategy must be Evict, Surge or Auto, got 'surge'"),
        ({"selector": {"podSelector": {}}}, "spec.selector.podSelector must set matchLabels or matchExpressions"),
        (
            {"selector": {"podSelector": {"matchExpressions": [{"key": "a", "operator": "Near"}]}}},
            "matchExpressions\\[0\\]: unknown selector operator 'Near'",
        ),
        ({"selector": {"namespaces": []}}, "spec.selector.namespaces must be a non-empty list"),
        ({"triggers": {"freeGPUs": {"below": 0}}}, "spec.triggers.freeGPUs.below must be at least 1"),
        ({"nodeSelector": {"matchLabels": {}}}, "spec.nodeSelector must set matchLabels or matchExpressions"),
    ],
)
def test_bad_policies_are_refused_with_the_field_and_the_problem(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy(policy(**spec))


@pytest.mark.parametrize("spec", [None, "x", 5, []])
def test_a_spec_of_the_wrong_type_is_an_error_not_a_crash(spec: Any) -> None:
    with pytest.raises(PolicyError):
        parse_policy({"metadata": {"name": "p"}, "spec": spec} if spec is not None else {"metadata": {}})


def test_selection_by_namespace_labels_and_priority() -> None:
    p = parse_policy(
        policy(selector={"namespaces": ["ml"], "podSelector": {"matchLabels": {"tier": "batch"}}, "maxPriority": 100})
    )

    def pod(ns: str, labels: dict[str, str], priority: int | None = None) -> dict[str, Any]:
        return {"metadata": {"namespace": ns, "labels": labels}, "spec": {"priority": priority}}

    assert p.selects_pod(pod("ml", {"tier": "batch"}, 100))
    assert p.selects_pod(pod("ml", {"tier": "batch"}))  # no priority counts as 0
    assert not p.selects_pod(pod("ml", {"tier": "batch"}, 101))
    assert not p.selects_pod(pod("web", {"tier": "batch"}))
    assert not p.selects_pod(pod("ml", {"tier": "serving"}))
    assert parse_policy(BASE).selects_node({}) and not parse_policy(
        policy(nodeSelector={"matchLabels": {"pool": "a100"}})
    ).selects_node({"pool": "t4"})


def moves(*minutes_ago: int) -> list[RecentMove]:
    return [RecentMove(f"ml/p{i}", "", NOW - dt.timedelta(minutes=m), "Succeeded") for i, m in enumerate(minutes_ago)]


def test_per_hour_budget_waits_until_the_oldest_move_leaves_the_hour() -> None:
    p = parse_policy(policy(budgets={"movesPerHour": 2}, minInterval="0s"))
    assert budget_wait(p, moves(50), NOW) is None
    why, until = budget_wait(p, moves(50, 20), NOW) or ("", NOW)
    assert "2 moves in the last hour (movesPerHour 2)" in why and until == NOW + dt.timedelta(minutes=10)
    assert budget_wait(p, moves(70, 65), NOW) is None  # older than an hour: not counted


def test_minimum_interval_counts_from_the_last_move() -> None:
    p = parse_policy(policy(minInterval="10m"))
    why, until = budget_wait(p, moves(4), NOW) or ("", NOW)
    assert "minInterval 600s" in why and until == NOW + dt.timedelta(minutes=6)
    assert budget_wait(p, moves(11), NOW) is None


def test_a_zero_budget_stops_moves() -> None:
    assert budget_wait(parse_policy(policy(budgets={"movesPerRun": 0})), [], NOW) is not None


def test_malformed_status_entries_count_for_nothing() -> None:
    status = {
        "recentMoves": [
            {"pod": "ml/a", "startedAt": "2026-12-06T11:50:00Z", "result": "Succeeded"},
            {"pod": "ml/b", "startedAt": "yesterday"},
            {"startedAt": "2026-12-06T11:55:00Z"},
            "junk",
        ],
        "failedPods": [
            {"pod": "ml/x", "failedAt": "2026-12-06T11:30:00Z", "reason": "PDB"},
            {"pod": "ml/old", "failedAt": "2026-12-06T10:30:00Z"},
            {"pod": 5},
        ],
    }
    assert [m.pod for m in recent_moves(status)] == ["ml/a"]
    assert cooling_pods(status, NOW) == {"ml/x": "PDB"}


# ---- hostile values (issue 39): a PolicyError naming the field, never another exception ------------
THIRTY_ONE_DIGITS = "9" * 31 + "h"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"minInterval": THIRTY_ONE_DIGITS}, "spec.minInterval: '9{31}h' is longer than 8784h \\(a year\\)"),
        (
            {"triggers": {"pendingPods": {"after": THIRTY_ONE_DIGITS}}},
            "spec.triggers.pendingPods.after: '9{31}h' is longer than 8784h",
        ),
        ({"minInterval": "²h"}, "spec.minInterval: '²h' is not a duration"),
        ({"minInterval": 300}, "spec.minInterval must be a duration such as 90s, 5m or 1h30m, got 300"),
        ({"window": {"schedule": "0 ² * * *", "duration": "1h"}}, "spec.window: cron '0 ² \\* \\* \\*': hour '²'"),
        ({"window": {"schedule": "٠ ٢ * * *", "duration": "1h"}}, "minute '٠' is not a number"),
        ({"window": {"schedule": "0 2 * * *", "duration": "nan"}}, "'nan' is not a duration"),
        ({"window": {"schedule": "0 2 * * *", "duration": "1h", "timeZone": "x" * 300}}, "unknown time zone 'xxx"),
        ({"window": {"schedule": ["0 2 * * *"], "duration": "1h"}}, "spec.window.schedule must be a string"),
        (
            {"selector": {"podSelector": {"matchLabels": {"a b": "x"}}}},
            "spec.selector.podSelector.matchLabels: 'a b' is not a label key",
        ),
        ({"nodeSelector": {"matchLabels": {"pool": "a b"}}}, "spec.nodeSelector.matchLabels\\[pool\\]: 'a b' is not"),
        ({"nodeSelector": {"matchLabels": {"Example.com/pool": "a"}}}, "its prefix must be a DNS subdomain"),
        ({"nodeSelector": {"matchLabels": {"pool": "x" * 64}}}, "is not a label value"),
        (
            {"nodeSelector": {"matchExpressions": [{"key": ["a"], "operator": "Exists"}]}},
            "spec.nodeSelector.matchExpressions\\[0\\].key: \\['a'\\] is not a label key",
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": "web"}]}},
            "matchExpressions\\[0\\].values must be a list of label values",
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "In", "values": ["a b"]}]}},
            "matchExpressions\\[0\\].values: 'a b' is not a label value",
        ),
        (
            {"nodeSelector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
            "operator Exists takes no values",
        ),
        ({"selector": {"namespaces": ["ML"]}}, "spec.selector.namespaces: 'ML' is not a namespace name"),
        ({"selector": {"namespaces": ["a" * 64]}}, "is not a namespace name"),
        ({"selector": {"maxPriority": 2**31}}, "spec.selector.maxPriority must be at most 2147483647"),
        ({"selector": {"maxPriority": -(2**31) - 1}}, "spec.selector.maxPriority must be at least -2147483648"),
        ({"budgets": {"movesPerHour": 10**30}}, "spec.budgets.movesPerHour must be at most 10000"),
        ({"budgets": {"movesPerRun": 1001}}, "spec.budgets.movesPerRun must be at most 1000"),
        ({"triggers": {"freeGPUs": {"below": 10**6}}}, "spec.triggers.freeGPUs.below must be at most 100000"),
        ({"budgets": {"movesPerNode": 10**5000}}, "must be at most 1000, got <int too large to show>"),
        ({"mode": "x" * 10_000}, "spec.mode must be DryRun or Apply, got 'x{62}…$"),
    ],
)
def test_hostile_values_are_policy_errors(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy(policy(**spec))


def test_bounds_at_their_limits_are_accepted() -> None:
    p = parse_policy(
        policy(
            minInterval="8784h",
            budgets={"movesPerRun": 1000, "movesPerHour": 10000, "movesPerNode": 1000, "movesPerWorkload": 1000},
            selector={"namespaces": ["a" * 63], "maxPriority": 2**31 - 1},
            nodeSelector={"matchLabels": {"example.com/" + "p" * 63: "v" * 63, "empty": ""}},
            window={"schedule": "* * * * *", "duration": "168h", "timeZone": "America/Argentina/Buenos_Aires"},
        )
    )
    assert p.min_interval == 8784 * 3600 and p.max_priority == 2**31 - 1 and p.window is not None


@pytest.mark.parametrize("obj", [[], "policy", 5])
def test_an_object_that_is_not_a_mapping_is_a_policy_error(obj: Any) -> None:
    with pytest.raises(PolicyError, match="a HamiDefragPolicy must be an object"):
        parse_policy(obj)


def test_crafted_start_times_wait_instead_of_overflowing() -> None:
    status = {
        "recentMoves": [
            {"pod": "ml/late", "startedAt": "9999-12-31T23:59:59Z"},
            {"pod": "ml/beyond", "startedAt": "9999-12-31T23:59:59-12:00"},  # 10000-01-01 in UTC: dropped
            {"pod": "ml/early", "startedAt": "0001-01-01T00:00:00+14:00"},  # year 0 in UTC: dropped
        ]
    }
    assert [m.pod for m in recent_moves(status)] == ["ml/late"]
    end_of_time = dt.datetime.max.replace(tzinfo=dt.UTC)
    for budgets, reason in (({"movesPerHour": 1}, "movesPerHour 1"), ({"movesPerHour": 10}, "minInterval 3.1622")):
        p = parse_policy(policy(minInterval="8784h", budgets=budgets))
        why, until = budget_wait(p, recent_moves(status), NOW) or ("", NOW)
        assert reason in why and until == end_of_time, why
