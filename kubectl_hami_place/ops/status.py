"""`status`: placements with phase, target, pod and age; `-w` follows them live."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.kube import Kube
from kubectl_hami_place.ops.args import ListOptions
from kubectl_hami_place.ops.cluster import connect
from kubectl_hami_place.printers import is_structured, object_name, print_structured, sort_items, structured_text

# -o name's resource, as kubectl prints it: <kind in lowercase>.<group>
RESOURCE = "hamipodplacement.scheduling.hami.placement.com"


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
    v = hp.placement_view(hp.Placement.from_object(obj))
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
    from tabulate import tabulate  # only for a table: an empty list, -o json/yaml/name never pay for it

    return tabulate(rows, headers=head or (), tablefmt="plain", disable_numparse=True)


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """-o json/yaml: the placements as `kubectl get -o json` prints them, a v1 List of the objects."""
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def names(items: list[dict[str, Any]]) -> str:
    """-o name: one resource/name per line, as kubectl prints it (no namespace, even with -A)."""
    return "\n".join(object_name(RESOURCE, o) for o in items)


def status(options: ListOptions) -> None:
    """The placements: a table, a List document, names, or (-w) a row per change."""
    name, output = options.name, options.output
    kube = connect(options.kube)
    all_ns = options.kube.all_namespaces and not name
    ns = None if all_ns else kube.effective_namespace()
    path = f"/apis/{hp.GROUP}/{hp.VERSION}/{hp.PLURAL}" if all_ns else hp.placement_path(str(ns))
    query: dict[str, Any] = {"labelSelector": options.selector}
    if name:
        query["fieldSelector"] = f"metadata.name={name}"
    listing = kube.request("GET", path, {**query})
    items = sorted(listing.get("items") or [], key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
    items = sort_items(items, options.sort_by)
    if name and not items:
        raise UserError(f"placement {ns}/{name} not found")
    wide = output == "wide"
    if not options.watch and is_structured(output):
        print_structured(as_list([{"apiVersion": hp.API_VERSION, "kind": hp.KIND, **o} for o in items]), output)
        return
    if not items and not options.watch:
        click.echo(f"no placements in {'any namespace' if all_ns else f'namespace {ns}'}", err=True)
        return
    if not options.watch:
        click.echo(names(items) if output == "name" else table(items, wide, all_ns, options.no_headers))
        return
    rv = listing["metadata"]["resourceVersion"]
    _watch(kube, path, query, items, rv, output, all_ns, bool(name), options.no_headers)


def table(items: list[dict[str, Any]], wide: bool, all_ns: bool, no_headers: bool = False) -> str:
    return _fmt([row(o, wide, all_ns) for o in items], None if no_headers else headers(wide, all_ns))


def _watch(
    kube: Kube,
    path: str,
    query: dict[str, Any],
    items: list[dict[str, Any]],
    rv: str,
    output: str,
    all_ns: bool,
    single: bool,
    no_headers: bool = False,
) -> None:
    wide = output == "wide"

    def emit(obj: dict[str, Any], first: bool = False) -> bool:
        click.echo(watch_line(obj, output, wide, all_ns, first and not no_headers))
        return single and hp.Placement.from_object(obj).phase in hp.TERMINAL

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


def watch_line(obj: dict[str, Any], output: str, wide: bool, all_ns: bool, header: bool) -> str:
    """What -w prints for one placement: the object (one line of JSON with -o json, a YAML document
    with -o yaml, the template's text with -o jsonpath), its name (-o name), or its table row."""
    if output == "json":
        return json.dumps(obj)
    if output == "yaml":
        return "---\n" + structured_text(obj, output).rstrip("\n")
    if is_structured(output):
        return structured_text(obj, output)
    if output == "name":
        return object_name(RESOURCE, obj)
    return _fmt([row(obj, wide, all_ns)], headers(wide, all_ns) if header else None)
