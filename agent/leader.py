"""Leader election through a coordination.k8s.io/v1 Lease, so only one replica runs the controller.

Every replica serves the webhooks and the REST API; only the leader moves pods. The lease is
taken or renewed with a resourceVersion precondition, so two replicas can never both believe they
hold it; a leader that cannot renew within the lease duration stops acting.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from agent.config import Settings
from agent.kube import AsyncKube
from hami_place_core.kube import errors as kube_errors

log = logging.getLogger("hami_place.agent.leader")


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: str | None) -> dt.datetime | None:
    if not ts:
        return None
    for fmt in ("%Y-%m-%dT%H:%M:%S.%fZ", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            return dt.datetime.strptime(ts, fmt).replace(tzinfo=dt.UTC)
        except ValueError:
            continue
    return None


class LeaderElector:
    def __init__(self, settings: Settings, kube: AsyncKube) -> None:
        self.settings = settings
        self.kube = kube
        self.is_leader = not settings.leader_election
        self.changed = asyncio.Event()
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases"

    async def run(self) -> None:
        if not self.settings.leader_election:
            return
        period = max(1.0, self.settings.lease_duration_seconds / 3)
        while True:
            try:
                leader = await self._try_acquire_or_renew()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - losing the API means losing the lease, not crashing
                log.warning("lease %s: %s", self.settings.lease_name, e)
                leader = False
            if leader != self.is_leader:
                log.info(
                    "%s %s leadership of %s",
                    self.settings.agent_id,
                    "took" if leader else "lost",
                    self.settings.lease_name,
                )
                self.is_leader = leader
                self.changed.set()
            await asyncio.sleep(period)

    async def _try_acquire_or_renew(self) -> bool:
        s = self.settings
        spec = {"holderIdentity": s.agent_id, "leaseDurationSeconds": s.lease_duration_seconds, "renewTime": _now()}
        try:
            lease = await self.kube.request("GET", f"{self.path}/{s.lease_name}")
        except kube_errors.NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": s.lease_name, "namespace": s.namespace},
                "spec": {**spec, "acquireTime": _now(), "leaseTransitions": 0},
            }
            try:
                await self.kube.request("POST", self.path, body=body)
                return True
            except kube_errors.Conflict:
                return False
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity")
        renewed = _parse(current.get("renewTime"))
        duration = int(current.get("leaseDurationSeconds") or s.lease_duration_seconds)
        expired = renewed is None or dt.datetime.now(dt.UTC) > renewed + dt.timedelta(seconds=duration)
        if holder != s.agent_id and not expired:
            return False
        new_spec = {**current, **spec}
        if holder != s.agent_id:
            new_spec["acquireTime"] = _now()
            new_spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = new_spec
        try:
            await self.kube.request("PUT", f"{self.path}/{s.lease_name}", body=lease)
            return True
        except kube_errors.Conflict:
            return False
