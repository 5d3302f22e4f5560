"""`kubectl hami-place status`: placements with phase, target, pod and age; `-w` follows live."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import click

from hami_place_core.kube import errors as kube_errors
from kubectl_hami_place.errors import UserError
from kubectl_hami_place.options import (
    OUTPUT_FORMATS,
    kube_options,
    no_headers_option,
    output_formats,
    selector_option,
    sort_by_option,
    watch_option,
)
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


def as_list(items: list[dict[str, Any]]) -> dict[str, Any]:
    """-o json/yaml: the placements as `kubectl get -o json` prints them, a v1 List of the objects."""
    return {"apiVersion": "v1", "kind": "List", "items": items, "metadata": {"resourceVersion": ""}}


def names(items: list[dict[str, Any]]) -> str:
    """-o name: one resource/name per line, as kubectl prints it (no namespace, even with -A)."""
    return "\n".join(object_name(RESOURCE, o) for o in items)


@click.command()
@click.argument("name", required=False)
@selector_option("Only placements with these labels (e.g. -l app=web).")
@watch_option("Watch: after the list, print a row each time a placement changes (with NAME: until it ends).")
@output_formats(
    (*OUTPUT_FORMATS, "name"),
    "Output format: table, wide (more columns), json or yaml (a List of the HamiPodPlacements, as kubectl "
    "get prints them), name (hamipodplacement.scheduling.hami.placement.com/NAME).",
    "{.items[*].status.phase}",
)
@no_headers_option
@sort_by_option
@kube_options
def status(
    name: str | None, selector: str | None, watch: bool, output: str, no_headers: bool, sort_by: str | None, **kw: Any
) -> None:
    """List placements: phase, reason, target, pod and age.

    Reads HamiPodPlacements from the API server (no agent needed). -o wide adds the reqID and
    the message; -o json/yaml print the placements as `kubectl get` does (a v1 List of the
    objects; with -w, one object per change); -o name and -o jsonpath=TEMPLATE work as in kubectl.

    \b
    Examples:
      kubectl hami-place status
      kubectl hami-place status -A -o wide
      kubectl hami-place status web-3fa9c2d1e0 -n ml -w
      kubectl hami-place status -o json | jq '.items[] | select(.status.phase=="Failed")'
      kubectl hami-place status -o jsonpath='{range .items[*]}{.metadata.name}{"\\t"}{.status.phase}{"\\n"}{end}'
      kubectl hami-place status -o name | xargs kubectl describe
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
    items = sort_items(items, sort_by)
    if name and not items:
        raise UserError(f"placement {ns}/{name} not found")
    wide = output == "wide"
    if not watch and is_structured(output):
        print_structured(as_list([{"apiVersion": hp.API_VERSION, "kind": hp.KIND, **o} for o in items]), output)
        return
    if not items and not watch:
        click.echo(f"no placements in {'any namespace' if all_ns else f'namespace {ns}'}", err=True)
        return
    if not watch:
        click.echo(names(items) if output == "name" else table(items, wide, all_ns, no_headers))
        return
    _watch(kube, path, query, items, listing["metadata"]["resourceVersion"], output, all_ns, bool(name), no_headers)


def table(items: list[dict[str, Any]], wide: bool, all_ns: bool, no_headers: bool = False) -> str:
    return _fmt([row(o, wide, all_ns) for o in items], None if no_headers else headers(wide, all_ns))


def _watch(
    kube: Any,
    path: str,
    query: dict[str, Any],
    items: list[dict[str, Any]],
    rv: str,
    output: str,
    all_ns: bool,
    single: bool,
    no_headers: bool = False,
) -> None:
    from hami_place_core import placement as hp

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
