"""The HamiDefragPolicy status table (hami_place_core/policy_lifecycle.py), cell by cell: every
state x every observation, as tests/unit/test_lifecycle.py does for placements. A policy's state
summarises its latest evaluation, so each observation leads to the same state from every source;
the table also says which Event is recorded, and when."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import yaml

from hami_place_core import defrag_policy as dp
from hami_place_core.policy_lifecycle import STEPS, Announce, PolicyState, Seen, announces, step

S = PolicyState
# observation -> (state, Ready, Event reason, Warning, when the Event is recorded)
EXPECTED = {
    Seen.INVALID: (S.BLOCKED, False, "", False, Announce.NEVER),
    Seen.SUSPENDED: (S.SUSPENDED, True, "", False, Announce.NEVER),
    Seen.NO_TRIGGER: (S.IDLE, True, "", False, Announce.NEVER),
    Seen.NO_PLAN: (S.BLOCKED, True, "NoPlan", True, Announce.NEW_MESSAGE),
    Seen.PLANNED: (S.PLANNED, True, "Planned", False, Announce.NEW_PLAN),
    Seen.OUTSIDE_WINDOW: (S.WAITING_FOR_WINDOW, True, "Planned", False, Announce.NEW_PLAN),
    Seen.OVER_BUDGET: (S.WAITING_FOR_BUDGET, True, "Planned", False, Announce.NEW_PLAN),
    Seen.POD_GONE: (S.BLOCKED, True, "", False, Announce.NEVER),
    Seen.MOVE_STARTED: (S.MOVING, True, "MoveStarted", False, Announce.ALWAYS),
    Seen.MOVE_IN_FLIGHT: (S.MOVING, True, "", False, Announce.NEVER),
    Seen.MOVE_FAILED: (S.PLANNED, True, "MoveFailed", True, Announce.ALWAYS),
    Seen.INTENT_REFUSED: (S.PLANNED, True, "IntentRefused", True, Announce.ALWAYS),
}
SOURCES = [*PolicyState, None, "SomethingACraftedStatusSays"]


def test_every_observation_has_a_row() -> None:
    assert set(STEPS) == set(Seen) == set(EXPECTED)


@pytest.mark.parametrize(("source", "seen"), list(itertools.product(SOURCES, Seen)))
def test_each_cell(source: object, seen: Seen) -> None:
    s = step(source, seen)  # type: ignore[arg-type]
    assert (s.state, s.ready, s.event, s.warning, s.announce) == EXPECTED[seen]


def test_when_an_event_is_recorded() -> None:
    blocked = step(S.BLOCKED, Seen.NO_PLAN)
    assert announces(blocked, ("Planned", "x"), ("Blocked", "no plan"), plan_changed=False)
    assert not announces(blocked, ("Blocked", "no plan"), ("Blocked", "no plan"), plan_changed=True)  # a repeat
    planned = step(S.IDLE, Seen.PLANNED)
    assert announces(planned, ("Idle", "a"), ("Planned", "b"), plan_changed=True)
    assert not announces(planned, ("Idle", "a"), ("Planned", "b"), plan_changed=False)  # the same plan
    assert announces(step(S.MOVING, Seen.MOVE_FAILED), ("Moving", "m"), ("Planned", "m"), plan_changed=False)
    assert not announces(step(S.MOVING, Seen.MOVE_IN_FLIGHT), ("Idle", "a"), ("Moving", "b"), plan_changed=True)


def test_the_states_are_the_crds() -> None:
    path = Path(__file__).resolve().parents[2] / "crds" / "hamidefragpolicies.scheduling.hami.placement.com.yaml"
    crd = yaml.safe_load(path.read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert status["properties"]["state"]["enum"] == list(dp.STATES) == [str(s) for s in PolicyState]
