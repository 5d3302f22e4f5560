"""The CRDs from crds/ (HamiPodPlacement, HamiDefragPolicy), installed on a test bed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
CRD_NAME = "hamipodplacements.scheduling.hami.placement.com"
CRD_FILE = REPO / "crds" / f"{CRD_NAME}.yaml"


def install_crd(api: Any) -> str:
    """Create every CRD from crds/ (HamiPodPlacement and HamiDefragPolicy), or replace what exists;
    wait for each to be Established. Returns what it did to the HamiPodPlacement CRD ("created" or
    "replaced"): a session installs them once per module that needs them."""
    actions = {path.name: _install(api, path) for path in sorted(CRD_FILE.parent.glob("*.yaml"))}
    return actions[CRD_FILE.name]


def _install(api: Any, path: Path) -> str:
    from kubernetes import client
    from kubernetes.client import ApiException

    ext: Any = client.ApiextensionsV1Api(api)  # untyped: the client takes plain dicts
    manifest = yaml.safe_load(path.read_text())
    name = manifest["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(manifest)
        action = "created"
    except ApiException as e:
        if e.status != 409:
            raise
        current = ext.read_custom_resource_definition(name)
        manifest["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(name, manifest)
        action = "replaced"

    def established() -> bool:
        got = ext.read_custom_resource_definition(name)
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    wait_for(f"the CRD {name} to be Established", established, 30)
    return action
