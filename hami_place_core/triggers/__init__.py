"""The autopilot's triggers, one module each, tried in this order on every evaluation (the first
that fires decides). A new trigger is a module with ``FIELD`` and a ``TRIGGER`` (triggers/base.py
says what it provides), one line in ``TRIGGERS`` below, and its block in the HamiDefragPolicy CRD's
``spec.triggers``."""

from __future__ import annotations

from hami_place_core.triggers import free_gpus, pending_pods
from hami_place_core.triggers.base import Decision, Trigger, TriggerContext

# Pending pods first: a pod that waits is the demand; the free-GPU threshold is for when none does.
TRIGGERS: tuple[Trigger, ...] = (pending_pods.TRIGGER, free_gpus.TRIGGER)

__all__ = ["TRIGGERS", "Decision", "Trigger", "TriggerContext"]
