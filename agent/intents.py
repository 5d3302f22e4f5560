"""Signed autopilot intents: a ``status.inFlight`` the agent wrote, told apart from one anybody wrote.

The autopilot records a move's intent in the policy's status before it creates the placement, so a
new leader can finish a move the previous one started (agent/autopilot.py). Whoever may write
``hamidefragpolicies/status`` can write such a record too, and the placement the autopilot creates
from it evicts with the agent's service account (issue 39: a forged intent evicted a pod in a
namespace its writer could not evict in). So each intent carries an HMAC over its fields and the
policy's UID, keyed by a secret every replica of one agent deployment shares (the chart's
``<release>-intent-key`` Secret, HAMI_PLACE_INTENT_KEY_FILE); a record without a valid signature is
never acted on. Without a key file the process makes its own key: it still refuses every forged
intent, but a new leader cannot finish a move whose placement the old one had not yet created.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

log = logging.getLogger("hami_place.agent.intents")

SIGNATURE = "signature"
# The fields a signature covers: everything the autopilot reads back to create a placement.
SIGNED = ("placement", "pod", "workload", "podUID", "startedAt", "node", "gpus", "reqID")
MIN_KEY_BYTES = 32


class IntentKeyError(ValueError):
    """The intent key file cannot be used; the message says why."""


class IntentSigner:
    def __init__(self, key_file: str = "") -> None:
        self.key_file = key_file
        if key_file:
            self._key()  # refuse a missing or short key at start-up, not at the first move
        else:
            self._own = secrets.token_bytes(MIN_KEY_BYTES)
            log.warning(
                "HAMI_PLACE_INTENT_KEY_FILE is not set: autopilot intents are signed with this process's own key, "
                "so another replica cannot finish a move whose placement this one had not yet created"
            )

    def _key(self) -> bytes:
        """The key, read each time: a rotated Secret takes effect without a restart."""
        if not self.key_file:
            return self._own
        try:
            key = Path(self.key_file).read_bytes().strip()
        except OSError as e:
            raise IntentKeyError(f"HAMI_PLACE_INTENT_KEY_FILE {self.key_file}: {e.strerror}") from None
        if len(key) < MIN_KEY_BYTES:
            raise IntentKeyError(f"HAMI_PLACE_INTENT_KEY_FILE {self.key_file}: at least {MIN_KEY_BYTES} bytes needed")
        return key

    def sign(self, policy_uid: str, flight: Mapping[str, Any]) -> str:
        return hmac.new(self._key(), _message(policy_uid, flight), hashlib.sha256).hexdigest()

    def verify(self, policy_uid: str, flight: Mapping[str, Any]) -> bool:
        given = flight.get(SIGNATURE)
        if not isinstance(given, str) or not policy_uid:
            return False
        try:
            expected = self.sign(policy_uid, flight)
        except IntentKeyError as e:
            log.error("autopilot: cannot check an intent's signature: %s", e)
            return False
        return hmac.compare_digest(given, expected)


def _message(policy_uid: str, flight: Mapping[str, Any]) -> bytes:
    fields = {k: flight.get(k) for k in SIGNED if flight.get(k) is not None}
    return json.dumps({"policyUID": policy_uid, **fields}, sort_keys=True, separators=(",", ":")).encode()
