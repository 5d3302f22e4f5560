"""The HamiPodPlacement CRD from crds/, installed on a test bed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from testbed.waiting import wait_for

REPO = Path(__file__).resolve().parents[1]
CRD_NAME = "hamipodplacements.scheduling.hami.placement.com"
CRD_FILE = REPO / "crds" / f"{CRD_NAME}.yaml"


def install_crd(api: Any) -> str:
    """Create the CRD from crds/, or replace it if it exists; wait for Established.
    Returns what it did ("created" or "replaced"): a session installs it once per module that needs it."""
    from kubernetes import client
    from kubernetes.client import ApiException

    ext: Any = client.ApiextensionsV1Api(api)  # untyped: the client takes plain dicts
    manifest = yaml.safe_load(CRD_FILE.read_text())
    try:
        ext.create_custom_resource_definition(manifest)
        action = "created"
    except ApiException as e:
        if e.status != 409:
            raise
        current = ext.read_custom_resource_definition(CRD_NAME)
        manifest["metadata"]["resourceVersion"] = current.metadata.resource_version
        ext.replace_custom_resource_definition(CRD_NAME, manifest)
        action = "replaced"

    def established() -> bool:
        got = ext.read_custom_resource_definition(CRD_NAME)
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    wait_for("the CRD to be Established", established, 30)
    return action
