"""The placement that carries one autopilot move: its name, derived from the intent, and its
creation, with the replacement's selector, the agent's own timeouts and evictPod.

The autopilot (agent/autopilot.py) decides and records the intent first; this module only turns a
recorded intent into a HamiPodPlacement, and says why it could not ("" when it did, or when the
placement exists already: an earlier attempt of the same intent).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
from typing import Any

from agent.cache import ClusterCache
from agent.config import Settings
from agent.kube import AsyncKube
from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.policy_status import InFlight

log = logging.getLogger("hami_place.agent.autopilot")

CREATED_BY = "hami-place-autopilot"
# How long a placement that could not be created for a transient reason (5xx, unreachable, 429) is
# tried again before the move counts as failed.
CREATE_RETRY_WINDOW = dt.timedelta(minutes=3)


def create_retry_open(flight: InFlight, now: dt.datetime) -> bool:
    """Whether a placement that could not be created for a transient reason is still tried again
    (CREATE_RETRY_WINDOW from the move's start), rather than failing the move."""
    started = dp.parse_time(flight.started_at) or now
    return now - started < CREATE_RETRY_WINDOW


def move_placement_name(policy: str, pod_uid: str, started: str) -> tuple[str, str]:
    """(name, reqID) of the placement for one move: the same intent always gives the same name."""
    digest = hashlib.sha256(f"{policy}/{pod_uid}/{started}".encode()).hexdigest()[:10]
    return hp.placement_name(f"autopilot-{policy}"[:200], digest), digest


class MovePlacements:
    """Creates the placement of a recorded move (the autopilot's only write outside a status)."""

    def __init__(self, settings: Settings, cache: ClusterCache, kube: AsyncKube) -> None:
        self.settings, self.cache, self.kube = settings, cache, kube

    async def create(self, policy: dp.Policy, flight: InFlight) -> str:
        """Create the move's placement; the reason it was refused, or "" (created, or it exists)."""
        namespace, _, name = flight.placement.partition("/")
        pod_ns, _, pod_name = flight.pod.partition("/")
        pod = self.cache.pod(pod_ns, pod_name)
        if pod is None:
            return f"pod {flight.pod} is gone"
        try:
            selector = hp.replacement_selector(pod, await self._owner(pod))
        except (kube_errors.KubeError, ValueError) as e:
            return f"no selector for the replacement of {flight.pod}: {e}"
        manifest = hp.new_placement(
            namespace,
            name,
            flight.req_id,
            selector,
            flight.node,
            list(flight.gpus),
            evict_pod=pod_name,
            created_by=CREATED_BY,
            strategy=policy.move_strategy,
        )
        manifest["metadata"]["labels"][dp.POLICY_LABEL] = policy.name
        # The agent's own timeouts (the CRD would default them to its own): a PDB that blocks an
        # autopilot move fails it in the agent's configured time, and the next plan avoids the pod.
        manifest["spec"]["timeouts"] = {
            "evictionSeconds": self.settings.eviction_timeout_seconds,
            "replacementSeconds": self.settings.replacement_timeout_seconds,
        }
        try:
            created = await self.kube.request("POST", hp.placement_path(namespace), body=manifest)
        except kube_errors.Conflict:
            return ""  # created before (an earlier attempt of this same intent)
        except (kube_errors.ServerError, kube_errors.Unreachable, kube_errors.TooManyRequests) as e:
            # Not a refusal: the API server could not call a webhook (a replica that just died
            # with the connection in use), or was away. The intent stays; the placement is created
            # again once PLACEMENT_GRACE has passed, until CREATE_RETRY_WINDOW says it is a failure.
            if create_retry_open(flight, dt.datetime.now(dt.UTC)):
                log.warning(
                    "autopilot: placement %s/%s not created (%s); retrying",
                    namespace,
                    name,
                    e,
                    extra={"policy": policy.name, "placement": f"{namespace}/{name}"},
                )
                return ""
            return f"placement {namespace}/{name} could not be created: {e}"[:500]
        except kube_errors.KubeError as e:
            # Refused (e.g. by the validating webhook): the move fails now, with the reason.
            log.warning(
                "autopilot: placement %s/%s refused: %s",
                namespace,
                name,
                e,
                extra={"policy": policy.name, "placement": f"{namespace}/{name}", "pod": flight.pod},
            )
            return f"placement {namespace}/{name} was refused: {e}"[:500]
        self.cache.apply("placements", {"type": "ADDED", "object": created})
        return ""

    async def _owner(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The pod's controller, whose selector its replacement carries. The pod's own labels are
        not enough: a scheduler may label a running pod (HAMi does), and its replacement, without
        those labels, would never claim the placement."""
        found = hp.owner_path(pod)
        if found is None:
            return None
        kind, path = found
        owner = dict(await self.kube.request("GET", path))
        owner.setdefault("kind", kind)
        return owner
