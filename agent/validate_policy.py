"""The validating webhook for HamiDefragPolicy: refuse a policy the autopilot could not follow, or
one that would let its author evict pods they could not evict themselves.

The CRD's schema and CEL rules check shape; this checks what they cannot (hami_place_core/
defrag_policy.py, the parser the autopilot itself uses): a cron expression that never fires, an
unknown time zone, a selector that does not parse. Then authority: a policy in Apply mode evicts
pods through the agent's service account, so its author must be allowed to create pods/eviction in
every namespace the policy selects (in every namespace, when it names none); a policy whose
moveStrategy may surge also scales Deployments and ReplicaSets there, so its author must be allowed
to patch their scale subresource too (the verb the agent uses, as for a placement's surge).
"""

from __future__ import annotations

import logging

from agent import metrics
from agent.admission import Review, Verdict
from agent.kube import AsyncKube
from agent.validate import may, may_evict
from hami_place_core import defrag_policy as dp
from hami_place_core import placement as hp

log = logging.getLogger("hami_place.agent.validate_policy")


class PolicyValidator:
    def __init__(self, kube: AsyncKube) -> None:
        self.kube = kube

    async def review(self, review: Review) -> Verdict:
        # A last resort, for a bug: parse_policy raises only PolicyError, whatever the object holds
        # (tests/unit/test_policy_fuzz.py drives this with hostile policies and expects no 500).
        try:
            return await self._review(review)
        except Exception as e:
            metrics.ERRORS.labels(kind="validate").inc()
            log.exception("validating webhook failed for policy %s", review.name)
            return Verdict(allowed=False, code=500, message=f"hami-place could not validate the policy: {e}")

    async def _review(self, review: Review) -> Verdict:
        if review.operation not in ("CREATE", "UPDATE"):
            return Verdict()
        if review.operation == "UPDATE" and review.old is not None and _same(review.obj, review.old, "spec"):
            return Verdict()  # status or metadata only: the autopilot's own writes
        try:
            policy = dp.parse_policy(review.obj)
        except dp.PolicyError as e:
            return Verdict(allowed=False, code=422, reason="Invalid", message=f"policy {review.name}: {e}")
        for namespace in sorted(policy.namespaces) if policy.namespaces is not None else [""]:
            refused = await self._authority(review, policy, namespace)
            if refused:
                return Verdict(allowed=False, code=403, reason="Forbidden", message=f"policy {review.name}: {refused}")
        return Verdict()

    async def _authority(self, review: Review, policy: dp.Policy, namespace: str) -> str:
        """Why the author may not have the autopilot act in `namespace` ("" if they may)."""
        who = review.username or "this user"
        where = f"namespace {namespace}" if namespace else "every namespace (the policy names none)"
        allowed, reason = await may_evict(self.kube, review.user, namespace)
        if not allowed:
            because = f" ({reason})" if reason else ""
            evict = "so may not have the autopilot evict pods there"
            return f"{who} may not create pods/eviction in {where}, {evict}{because}"
        if policy.move_strategy == hp.EVICT:
            return ""
        for resource in ("deployments/scale", "replicasets/scale"):
            allowed, reason = await may(review.user, self.kube, namespace, "patch", "apps", resource)
            if not allowed:
                because = f" ({reason})" if reason else ""
                return (
                    f"{who} may not patch {resource} in {where}, so may not have the autopilot surge workloads "
                    f"there (moveStrategy {policy.move_strategy}){because}"
                )
        return ""


def _same(obj: dict[str, object], old: dict[str, object], key: str) -> bool:
    """obj[key] == old[key]; a value nested too deep to compare counts as changed, and is judged as
    any new spec is (a review may nest 1,024 levels, agent/admission.py; == recurses about 1,000)."""
    try:
        return obj.get(key) == old.get(key)
    except RecursionError:
        return False
