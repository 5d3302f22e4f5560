"""Resolving what the user names (deploy/web, sts/db, -l app=web, a pod) into pod selectors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hami_place_core.kube import errors as kube_errors
from hami_place_core.placement import owner_path, replacement_selector
from hami_place_core.selectors import SelectorError, parse_selector
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube

# kubectl's short names and plurals for the controllers whose pods a placement can select
KINDS: dict[str, tuple[str, str]] = {
    "deploy": ("Deployment", "/apis/apps/v1/namespaces/{ns}/deployments/{name}"),
    "deployment": ("Deployment", "/apis/apps/v1/namespaces/{ns}/deployments/{name}"),
    "deployments": ("Deployment", "/apis/apps/v1/namespaces/{ns}/deployments/{name}"),
    "sts": ("StatefulSet", "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"),
    "statefulset": ("StatefulSet", "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"),
    "statefulsets": ("StatefulSet", "/apis/apps/v1/namespaces/{ns}/statefulsets/{name}"),
    "rs": ("ReplicaSet", "/apis/apps/v1/namespaces/{ns}/replicasets/{name}"),
    "replicaset": ("ReplicaSet", "/apis/apps/v1/namespaces/{ns}/replicasets/{name}"),
    "replicasets": ("ReplicaSet", "/apis/apps/v1/namespaces/{ns}/replicasets/{name}"),
}


@dataclass(frozen=True)
class Workload:
    """What a placement selects: a description for messages, a name stem and the selector."""

    description: str
    stem: str
    selector: dict[str, Any]


def parse_ref(ref: str) -> tuple[str, str]:
    """`deploy/web` → ("Deployment", "web"); a usage error for anything else."""
    kind, sep, name = ref.partition("/")
    if not sep or not name or kind.lower() not in KINDS:
        raise UserError(
            f"cannot use {ref!r} as a workload: give deploy/NAME, sts/NAME or rs/NAME, or a selector with -l"
        )
    return KINDS[kind.lower()][0], name


def _get(kube: Kube, path: str, what: str) -> dict[str, Any]:
    try:
        obj = kube.request("GET", path)
    except kube_errors.NotFound as e:
        raise UserError(f"{what} not found") from e
    return dict(obj)


def resolve_workload(kube: Kube, namespace: str, ref: str | None, selector: str | None) -> Workload:
    if bool(ref) == bool(selector):
        raise UserError("name exactly one of a workload (deploy/NAME, sts/NAME, rs/NAME) or -l SELECTOR")
    if selector:
        try:
            parsed = parse_selector(selector)
        except SelectorError as e:
            raise UserError(f"bad selector: {e}") from e
        return Workload(f"pods matching {selector} in {namespace}", "pods", parsed)
    assert ref is not None
    kind, name = parse_ref(ref)
    key = next(k for k, v in KINDS.items() if v[0] == kind)
    obj = _get(kube, KINDS[key][1].format(ns=namespace, name=name), f"{kind} {namespace}/{name}")
    sel = dict((obj.get("spec") or {}).get("selector") or {})
    if not sel.get("matchLabels") and not sel.get("matchExpressions"):
        raise UserError(f"{kind} {namespace}/{name} has an empty selector; use -l to say which pods to pin")
    return Workload(f"the next pod of {kind} {namespace}/{name}", name, sel)


def get_pod(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return _get(kube, f"/api/v1/namespaces/{namespace}/pods/{name}", f"pod {namespace}/{name}")


def controller_of(kube: Kube, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controlling owner object, or None for a standalone pod (or an unknown kind)."""
    found = owner_path(pod)
    if found is None:
        return None
    kind, path = found
    meta = pod.get("metadata") or {}
    ref = next(o for o in meta.get("ownerReferences") or () if o.get("controller"))
    owner = _get(kube, path, f"{kind} {meta.get('namespace', '')}/{ref.get('name', '')}")
    owner.setdefault("kind", kind)
    return owner


def pod_workload(kube: Kube, pod: dict[str, Any]) -> Workload:
    """The selector that matches this pod's replacement (see replacement_selector)."""
    meta = pod.get("metadata") or {}
    owner = controller_of(kube, pod)
    try:
        sel = replacement_selector(pod, owner)
    except ValueError as e:
        raise UserError(str(e)) from e
    if owner is None:
        return Workload(f"pod {meta.get('namespace')}/{meta.get('name')}", str(meta.get("name")), sel)
    kind, name = owner.get("kind"), (owner.get("metadata") or {}).get("name")
    return Workload(f"the replacement of pod {meta.get('name')} ({kind} {name})", str(meta.get("name")), sel)
