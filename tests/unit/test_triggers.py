"""The trigger registry (hami_place_core/triggers/): each trigger parses its own block of
spec.triggers, the registry's order decides which fires first, and a new trigger is one module
that the policy parser and the autopilot's decision pick up without a change of their own."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pytest

from agent import autopilot_plan
from hami_place_core import defrag_policy as dp
from hami_place_core.policy_fields import PolicyError, integer, mapping
from hami_place_core.state import build_state
from hami_place_core.triggers import TRIGGERS, Decision, TriggerContext, free_gpus, pending_pods
from tests.planner_fixtures import node, pod

NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)


def parse(triggers: dict[str, Any]) -> dp.Policy:
    spec = {"triggers": triggers, "selector": {"namespaces": ["ns"]}}
    return dp.parse_policy({"metadata": {"name": "p"}, "spec": spec})


def test_pending_pods_come_before_free_gpus() -> None:
    assert [t.field for t in TRIGGERS] == ["pendingPods", "freeGPUs"]


def test_each_trigger_parses_its_own_block() -> None:
    p = parse({"pendingPods": {"after": "90s"}, "freeGPUs": {"below": 4}})
    assert p.triggers == {"pendingPods": pending_pods.PendingPods(90.0), "freeGPUs": free_gpus.FreeGPUs(4)}
    assert (p.pending_after, p.free_below) == (90.0, 4)
    assert parse({"freeGPUs": {"below": 1}}).pending_after is None
    with pytest.raises(PolicyError, match=r"^spec.triggers.pendingPods.after is required"):
        parse({"pendingPods": {}})
    with pytest.raises(PolicyError, match=r"^spec.triggers.freeGPUs.below must be at most 100000"):
        parse({"freeGPUs": {"below": 100_001}})
    with pytest.raises(PolicyError, match="must set pendingPods or freeGPUs"):
        parse({})


@dataclass(frozen=True)
class Always:
    label: str


class AlwaysTrigger:
    """A trigger a test adds: it fires whenever its block says so, with no plan."""

    field = "always"

    def parse(self, value: object, where: str) -> Always:
        label = mapping(value, where).get("label")
        if not isinstance(label, str):
            raise PolicyError(f"{where}.label must be a string")
        return Always(label)

    def evaluate(self, ctx: TriggerContext, config: Always) -> Decision | None:
        assert integer(ctx.policy.budgets.moves_per_node, "x", 0) == 2  # the policy reaches it
        return Decision(trigger=f"always: {config.label}", blocked="nothing to do")


def test_a_new_trigger_is_one_module_and_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = (*TRIGGERS, AlwaysTrigger())
    monkeypatch.setattr(dp, "TRIGGERS", registry)
    monkeypatch.setattr(autopilot_plan, "TRIGGERS", registry)
    policy = parse({"always": {"label": "demo"}})
    assert policy.triggers == {"always": Always("demo")}
    with pytest.raises(PolicyError, match=r"spec\.triggers\.always\.label must be a string"):
        parse({"always": {}})
    state = build_state([node("n0", 4)], [pod("a", "n0", (0,), 30)])
    d = autopilot_plan.decide(policy, state, {}, {}, [], NOW)
    assert d == Decision(trigger="always: demo", blocked="nothing to do")
    # A registered trigger that fires earlier wins: a free-GPU shortage comes before it.
    both = parse({"freeGPUs": {"below": 9}, "always": {"label": "demo"}})
    assert autopilot_plan.decide(both, state, {}, {}, [], NOW).trigger == "3 whole GPUs free (below 9)"
