"""`kubectl hami-place status`: placements with phase, target, pod and age; `-w` follows live."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.options import kube_options, output_option, selector_option, watch_option


def age(created: str | None, now: datetime | None = None) -> str:
    """kubectl's short age: 45s, 12m, 3h, 5d."""
    if not created:
        return "?"
    try:
        then = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return "?"
    secs = max(0, int(((now or datetime.now(UTC)) - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size * (2 if unit != "m" else 1):
            return f"{secs // size}{unit}"
    return f"{secs}s"


def row(obj: dict[str, Any], wide: bool, all_namespaces: bool) -> list[str]:
    from hami_place_core.placement import Placement, placement_view

    v = placement_view(Placement.from_object(obj))
    target = f"{v['nodeName']}:{','.join(v['gpuDevices'])}"
    pod = v["boundPod"] or (f"{v['evictPod']} (evict)" if v["evictPod"] else "-")
    out = [v["name"], v["phase"], v["reason"] or "-", target, pod, age(obj["metadata"].get("creationTimestamp"))]
    if all_namespaces:
        out.insert(0, v["namespace"])
    if wide:
        out += [v["reqID"], (v["message"] or "")[:120]]
    return out


def headers(wide: bool, all_namespaces: bool) -> list[str]:
    h = ["NAME", "PHASE", "REASON", "TARGET", "POD", "AGE"]
    if all_namespaces:
        h.insert(0, "NAMESPACE")
    return h + (["REQID", "MESSAGE"] if wide else [])


def _fmt(rows: list[list[str]], head: list[str] | None) -> str:
    from tabulate import tabulate

    return tabulate(rows, headers=head or (), tablefmt="plain", disable_numparse=True)


@click.command()
@click.argument("name", required=False)
@selector_option("Only placements with these labels (e.g. -l app=web).")
@watch_option("Watch: after the list, print a row each time a placement changes (with NAME: until it ends).")
@output_option
@kube_options
def status(name: str | None, selector: str | None, watch: bool, output: str, **kw: Any) -> None:
    """List placements: phase, reason, target, pod and age.

    Reads HamiPodPlacements from the API server (no agent needed). -o wide adds the reqID and
    the message; -o json/yaml prints the same flat view the agent's REST API serves.

    \b
    Examples:
      kubectl hami-place status
      kubectl hami-place status -A -o wide
      kubectl hami-place status web-3fa9c2d1e0 -n ml -w
      kubectl hami-place status -o json | jq '.items[] | select(.phase=="Failed")'
    """
    from hami_place_core import placement as hp
    from kubectl_hami_place.kube import Kube

    kube = Kube(kw["kubeconfig"], kw["context"], kw["namespace"], kw["all_namespaces"], kw["request_timeout"])
    all_ns = bool(kw["all_namespaces"]) and not name
    ns = None if all_ns else kube.effective_namespace()
    path = f"/apis/{hp.GROUP}/{hp.VERSION}/{hp.PLURAL}" if all_ns else hp.placement_path(str(ns))
    query: dict[str, Any] = {"labelSelector": selector}
    if name:
        query["fieldSelector"] = f"metadata.name={name}"
    listing = kube.request("GET", path, {**query})
    items = sorted(listing.get("items") or [], key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
    if name and not items:
        raise UserError(f"placement {ns}/{name} not found")
    wide = output == "wide"
    if output in ("json", "yaml") and not watch:
        doc = {"items": [hp.placement_view(hp.Placement.from_object(o)) for o in items], "count": len(items)}
        if output == "json":
            click.echo(json.dumps(doc, indent=2))
        else:
            import yaml

            click.echo(yaml.safe_dump(doc, sort_keys=False), nl=False)
        return
    if not watch:
        if not items:
            click.echo(f"no placements in {'any namespace' if all_ns else f'namespace {ns}'}", err=True)
            return
        click.echo(_fmt([row(o, wide, all_ns) for o in items], headers(wide, all_ns)))
        return
    _watch(kube, path, query, items, listing["metadata"]["resourceVersion"], output, all_ns, bool(name))


def _watch(
    kube: Any,
    path: str,
    query: dict[str, Any],
    items: list[dict[str, Any]],
    rv: str,
    output: str,
    all_ns: bool,
    single: bool,
) -> None:
    from hami_place_core import placement as hp

    wide = output == "wide"
    structured = output in ("json", "yaml")

    def emit(obj: dict[str, Any], first: bool = False) -> bool:
        view = hp.placement_view(hp.Placement.from_object(obj))
        if structured:
            click.echo(json.dumps(view))
        else:
            click.echo(_fmt([row(obj, wide, all_ns)], headers(wide, all_ns) if first else None))
        return single and view["phase"] in hp.TERMINAL

    for i, obj in enumerate(items):
        if emit(obj, first=i == 0):
            return
    header_shown = bool(items)
    while True:  # a server-side watch timeout or a 410 just resumes
        try:
            for ev in kube.watch(path, {**query, "resourceVersion": rv, "allowWatchBookmarks": "true"}):
                obj = ev.get("object") or {}
                rv = obj.get("metadata", {}).get("resourceVersion") or rv
                if ev.get("type") == "BOOKMARK":
                    continue
                if ev.get("type") == "DELETED":
                    name = obj["metadata"]["name"]
                    click.echo(f"{name} deleted")
                    if single:
                        return
                    continue
                if emit(obj, first=not header_shown):
                    return
                header_shown = True
        except kube_errors.Gone:  # too old: list again, print nothing twice
            rv = kube.request("GET", path, {**query, "limit": 1})["metadata"]["resourceVersion"]
