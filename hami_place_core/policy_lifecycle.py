"""A HamiDefragPolicy's status as a table: (what an evaluation observed) -> state, Ready, Event.

Pure: no clock, no I/O. The autopilot (agent/autopilot.py) evaluates a policy, names what it
observed (``Seen``), and the one writer of a policy's status (agent/policy_writer.py) asks
``step`` for the state, the Ready condition and the Event that follow. Unlike a placement, whose
phases only move forward, a policy's state summarises its latest evaluation: every state may be
followed by any observation (a new spec, a move that ended, a trigger that stopped firing), so the
table is keyed by the observation alone and ``step`` takes the source state only to say so
(tested over every state x observation, as for placements).

The state names are the CRD's ``status.state`` enum and the ``policies`` command's STATE column.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PolicyState(StrEnum):
    IDLE = "Idle"  # no trigger fires
    PLANNED = "Planned"  # a plan exists; DryRun, nothing to move, or the last move failed
    MOVING = "Moving"  # a move is in flight
    WAITING_FOR_WINDOW = "WaitingForWindow"  # a plan waits for the move window to open
    WAITING_FOR_BUDGET = "WaitingForBudget"  # a plan waits for a budget or the minimum interval
    BLOCKED = "Blocked"  # a trigger fired but no plan can run, or the policy does not parse
    SUSPENDED = "Suspended"  # spec.suspend


class Seen(StrEnum):
    """What one evaluation of a policy observed (the input of the table)."""

    INVALID = "Invalid"  # the spec does not parse
    SUSPENDED = "Suspended"  # spec.suspend is true
    NO_TRIGGER = "NoTrigger"  # no trigger fires
    NO_PLAN = "NoPlan"  # a trigger fires, but no plan can run
    PLANNED = "Planned"  # a plan, not to run now: DryRun, nothing to move, a standalone pod's room
    OUTSIDE_WINDOW = "OutsideWindow"  # a plan to run, outside the move window
    OVER_BUDGET = "OverBudget"  # a plan to run, a budget or the minimum interval says wait
    POD_GONE = "PodGone"  # the pod the plan moves first left the cache
    MOVE_STARTED = "MoveStarted"  # the intent was recorded: the move's placement follows
    MOVE_IN_FLIGHT = "MoveInFlight"  # a recorded move is still running
    MOVE_FAILED = "MoveFailed"  # the move's placement could not be created
    INTENT_REFUSED = "IntentRefused"  # a recorded intent the agent did not sign, or cannot act on


class Announce(StrEnum):
    """When the step's Event is recorded (Events are for people: a repeat is noise)."""

    NEVER = "Never"
    ALWAYS = "Always"
    NEW_MESSAGE = "NewMessage"  # the state or the message changed
    NEW_PLAN = "NewPlan"  # the plan changed


@dataclass(frozen=True)
class Step:
    state: PolicyState
    ready: bool = True  # the Ready condition: False only for a policy that cannot be followed
    event: str = ""  # the Event's reason ("" for none)
    warning: bool = False
    announce: Announce = Announce.NEVER


STEPS: dict[Seen, Step] = {
    Seen.INVALID: Step(PolicyState.BLOCKED, ready=False),
    Seen.SUSPENDED: Step(PolicyState.SUSPENDED),
    Seen.NO_TRIGGER: Step(PolicyState.IDLE),
    Seen.NO_PLAN: Step(PolicyState.BLOCKED, event="NoPlan", warning=True, announce=Announce.NEW_MESSAGE),
    Seen.PLANNED: Step(PolicyState.PLANNED, event="Planned", announce=Announce.NEW_PLAN),
    Seen.OUTSIDE_WINDOW: Step(PolicyState.WAITING_FOR_WINDOW, event="Planned", announce=Announce.NEW_PLAN),
    Seen.OVER_BUDGET: Step(PolicyState.WAITING_FOR_BUDGET, event="Planned", announce=Announce.NEW_PLAN),
    Seen.POD_GONE: Step(PolicyState.BLOCKED),
    Seen.MOVE_STARTED: Step(PolicyState.MOVING, event="MoveStarted", announce=Announce.ALWAYS),
    Seen.MOVE_IN_FLIGHT: Step(PolicyState.MOVING),
    Seen.MOVE_FAILED: Step(PolicyState.PLANNED, event="MoveFailed", warning=True, announce=Announce.ALWAYS),
    Seen.INTENT_REFUSED: Step(PolicyState.PLANNED, event="IntentRefused", warning=True, announce=Announce.ALWAYS),
}


def step(source: PolicyState | str | None, seen: Seen) -> Step:
    """What follows `seen`, from any `source` state (or none yet, or one a crafted status holds)."""
    del source  # every state may be followed by every observation (module docstring)
    return STEPS[seen]


def announces(s: Step, old: tuple[object, object], new: tuple[object, object], plan_changed: bool) -> bool:
    """Whether the step's Event is recorded: `old`/`new` are (state, message) before and after."""
    if not s.event or s.announce == Announce.NEVER:
        return False
    if s.announce == Announce.NEW_MESSAGE:
        return old != new
    if s.announce == Announce.NEW_PLAN:
        return plan_changed
    return True
