"""The HamiPodPlacement CRD, installed from crds/ on the real kube-apiserver: what it accepts and refuses.

Every rejection asserts the apiserver's own message text, so a schema edit that silently drops
a rule (or rewords a message users and the docs rely on) fails here.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiException

from testbed.controlplane.crd import CRD_FILE, CRD_NAME, install_crd

pytestmark = pytest.mark.testbed

GROUP, VERSION, PLURAL = "scheduling.hami.placement.com", "v1", "hamipodplacements"

# The upstream doc's example, verbatim except for the namespace (each test gets its own).
DOC_EXAMPLE = """\
apiVersion: scheduling.hami.placement.com/v1
kind: HamiPodPlacement
metadata:
  name: pin-gpu0
  namespace: default
spec:
  reqID: "pin-gpu0-001"
  podSelector:
    matchLabels:
      app: my-job
  nodeName: gpu-node-1
  gpuDevices:
  - gpu-0
"""

DEFAULT_TIMEOUTS = {"evictionSeconds": 300, "replacementSeconds": 600}
MISSING = object()  # marks a spec field to delete in _spec()


def _doc_example(ns: str) -> dict[str, Any]:
    obj = yaml.safe_load(DOC_EXAMPLE)
    obj["metadata"]["namespace"] = ns
    return obj


def _spec(**changes: Any) -> dict[str, Any]:
    """The doc example's spec with fields replaced (or removed, with MISSING)."""
    spec = copy.deepcopy(yaml.safe_load(DOC_EXAMPLE)["spec"])
    for key, value in changes.items():
        if value is MISSING:
            spec.pop(key, None)
        else:
            spec[key] = value
    return spec


def _placement(ns: str, spec: dict[str, Any], name: str = "pin-gpu0") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def _rejection(call: Any) -> str:
    """Run call(), which must fail with 422; return the apiserver's message."""
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 422, refused.value.body
    return json.loads(refused.value.body)["message"]


@pytest.fixture(scope="module")
def crd(api) -> str:
    """The CRD from crds/, installed (or refreshed, if an earlier module installed it) and Established."""
    return install_crd(api)


@pytest.fixture
def custom(api, crd) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def _create(custom: client.CustomObjectsApi, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, body)


# ---- accepted -------------------------------------------------------------------------------


def test_crd_is_established_with_names_and_short_name(api, crd) -> None:
    got = client.ApiextensionsV1Api(api).read_custom_resource_definition(CRD_NAME)
    names = got.status.accepted_names
    assert (names.kind, names.list_kind, names.plural, names.singular) == (
        "HamiPodPlacement",
        "HamiPodPlacementList",
        "hamipodplacements",
        "hamipodplacement",
    )
    assert names.short_names == ["hpp"]
    assert names.categories == ["hami"]
    assert got.spec.scope == "Namespaced"
    (version,) = got.spec.versions
    assert (version.name, version.served, version.storage) == ("v1", True, True)
    assert version.subresources.status == {}


def test_every_schema_field_has_a_description() -> None:
    manifest = yaml.safe_load(CRD_FILE.read_text())
    root = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    undocumented: list[str] = []

    def walk(node: dict[str, Any], path: str) -> None:
        for name, child in node.get("properties", {}).items():
            if name != "metadata" and not child.get("description", "").strip():
                undocumented.append(f"{path}.{name}")
            walk(child, f"{path}.{name}")
        if "items" in node:
            walk(node["items"], f"{path}[]")

    walk(root, "")
    assert undocumented == []
    # Every string has a length bound, every list an item bound.
    unbounded: list[str] = []

    def bounds(node: dict[str, Any], path: str) -> None:
        kind = node.get("type")
        if kind == "string" and "maxLength" not in node and "enum" not in node and node.get("format") != "date-time":
            unbounded.append(path)
        if kind == "array" and "maxItems" not in node:
            unbounded.append(path)
        for name, child in node.get("properties", {}).items():
            if name not in ("apiVersion", "kind", "metadata"):
                bounds(child, f"{path}.{name}")
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                bounds(node[key], f"{path}[]")

    bounds(root, "")
    assert unbounded == []


def test_installing_again_replaces_the_crd_in_place(api, crd) -> None:
    ext = client.ApiextensionsV1Api(api)
    before = ext.read_custom_resource_definition(CRD_NAME)
    assert install_crd(api) == "replaced"
    after = ext.read_custom_resource_definition(CRD_NAME)
    assert after.metadata.uid == before.metadata.uid
    # Same manifest: a no-op update, so the generation (spec version) does not move.
    assert after.metadata.generation == before.metadata.generation


def test_doc_example_is_accepted_as_written(custom, ns) -> None:
    created = _create(custom, ns, _doc_example(ns))
    assert created["kind"] == "HamiPodPlacement"
    assert created["metadata"]["namespace"] == ns
    # Only the timeouts default is added to what the user wrote.
    assert created["spec"] == {**_spec(), "timeouts": DEFAULT_TIMEOUTS}
    assert "status" not in created
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pin-gpu0")
    assert stored["spec"] == created["spec"]


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"gpuDevices": ["gpu-0/70"]}, id="percentage"),
        pytest.param({"evictPod": "my-job-7d9f8c6b5-x2x4q"}, id="evictPod"),
        pytest.param({"gpuDevices": ["gpu-0/50", "gpu-1/50"]}, id="two-devices-same-percentage"),
        pytest.param({"gpuDevices": ["gpu-3", "gpu-1"]}, id="two-whole-gpus"),
        pytest.param({"gpuDevices": [f"gpu-{i}/100" for i in range(16)]}, id="sixteen-devices"),
        pytest.param({"gpuDevices": ["gpu-999/1"]}, id="largest-index-smallest-percentage"),
        pytest.param({"reqID": "a_b.c", "nodeName": "gpu-node-1.rack-2.example.com"}, id="min-reqid-dotted-node"),
        pytest.param({"reqID": "R" * 63}, id="max-reqid"),
        pytest.param(
            {
                "podSelector": {
                    "matchExpressions": [
                        {"key": "app", "operator": "In", "values": ["my-job", "my-other-job"]},
                        {"key": "example.com/team", "operator": "NotIn", "values": ["infra"]},
                        {"key": "gpu", "operator": "Exists"},
                        {"key": "canary", "operator": "DoesNotExist", "values": []},
                    ]
                }
            },
            id="matchExpressions",
        ),
        pytest.param(
            {
                "podSelector": {
                    "matchLabels": {"app": "my-job"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
                }
            },
            id="matchLabels-and-matchExpressions",
        ),
        pytest.param(
            {"evictPod": "trainer-0", "timeouts": {"evictionSeconds": 1, "replacementSeconds": 86400}},
            id="timeouts-at-bounds",
        ),
    ],
)
def test_valid_variants_are_accepted_and_stored_as_sent(custom, ns, changes) -> None:
    spec = _spec(**changes)
    created = _create(custom, ns, _placement(ns, spec))
    assert created["spec"] == {"timeouts": DEFAULT_TIMEOUTS, **spec}


@pytest.mark.parametrize(
    ("timeouts", "expected"),
    [
        pytest.param({}, DEFAULT_TIMEOUTS, id="empty"),
        pytest.param({"evictionSeconds": 30}, {"evictionSeconds": 30, "replacementSeconds": 600}, id="eviction-only"),
        pytest.param(
            {"replacementSeconds": 45}, {"evictionSeconds": 300, "replacementSeconds": 45}, id="replacement-only"
        ),
    ],
)
def test_timeouts_defaults_are_applied(custom, ns, timeouts, expected) -> None:
    created = _create(custom, ns, _placement(ns, _spec(evictPod="my-job-0", timeouts=timeouts)))
    assert created["spec"]["timeouts"] == expected
    stored = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, "pin-gpu0")
    assert stored["spec"]["timeouts"] == expected


# ---- rejected -------------------------------------------------------------------------------

SELECTOR_EMPTY = (
    "podSelector must set matchLabels or matchExpressions: an empty selector would match every pod in the namespace"
)
SAME_PERCENTAGE = (
    "all gpuDevices entries must use the same percentage (e.g. gpu-0/50, gpu-1/50): "
    "HAMi applies one request to all of a container's GPUs"
)
IN_NEEDS_VALUES = "matchExpressions with operator In or NotIn must have a non-empty values list"
EXISTS_NO_VALUES = "matchExpressions with operator Exists or DoesNotExist must not have values"
GPU_PATTERN = "^gpu-(0|[1-9][0-9]{0,2})(/([1-9][0-9]?|100))?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
REQID_PATTERN = "^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


def _expr(**kw: Any) -> dict[str, Any]:
    return {"matchExpressions": [kw]}


BAD_SPECS = [
    # reqID
    pytest.param(
        _spec(reqID="abcd"),
        'spec.reqID: Invalid value: "abcd": spec.reqID in body should be at least 5 chars long',
        id="reqID-4-chars",
    ),
    pytest.param(_spec(reqID="r" * 64), "spec.reqID: Too long: may not be more than 63 bytes", id="reqID-64-chars"),
    pytest.param(
        _spec(reqID="pin gpu0!"),
        f"spec.reqID: Invalid value: \"pin gpu0!\": spec.reqID in body should match '{REQID_PATTERN}'",
        id="reqID-bad-characters",
    ),
    pytest.param(
        _spec(reqID="-pin-gpu0"),
        f"spec.reqID: Invalid value: \"-pin-gpu0\": spec.reqID in body should match '{REQID_PATTERN}'",
        id="reqID-leading-dash",
    ),
    # required fields
    pytest.param(_spec(reqID=MISSING), "spec.reqID: Required value", id="missing-reqID"),
    pytest.param(_spec(nodeName=MISSING), "spec.nodeName: Required value", id="missing-nodeName"),
    pytest.param(_spec(gpuDevices=MISSING), "spec.gpuDevices: Required value", id="missing-gpuDevices"),
    pytest.param(_spec(podSelector=MISSING), "spec.podSelector: Required value", id="missing-podSelector"),
    # podSelector
    pytest.param(_spec(podSelector={}), f"spec.podSelector: Invalid value: {SELECTOR_EMPTY}", id="empty-podSelector"),
    pytest.param(
        _spec(podSelector={"matchLabels": {}, "matchExpressions": []}),
        f"spec.podSelector: Invalid value: {SELECTOR_EMPTY}",
        id="podSelector-with-empty-parts",
    ),
    pytest.param(
        _spec(podSelector=_expr(key="app", operator="In")),
        f"spec.podSelector.matchExpressions[0]: Invalid value: {IN_NEEDS_VALUES}",
        id="In-without-values",
    ),
    pytest.param(
        _spec(podSelector=_expr(key="app", operator="NotIn", values=[])),
        f"spec.podSelector.matchExpressions[0]: Invalid value: {IN_NEEDS_VALUES}",
        id="NotIn-with-empty-values",
    ),
    pytest.param(
        _spec(podSelector=_expr(key="app", operator="Exists", values=["my-job"])),
        f"spec.podSelector.matchExpressions[0]: Invalid value: {EXISTS_NO_VALUES}",
        id="Exists-with-values",
    ),
    pytest.param(
        _spec(podSelector=_expr(key="app", operator="Equals", values=["my-job"])),
        'spec.podSelector.matchExpressions[0].operator: Unsupported value: "Equals": supported values: '
        '"In", "NotIn", "Exists", "DoesNotExist"',
        id="bad-operator",
    ),
    pytest.param(
        _spec(podSelector=_expr(operator="Exists")),
        "spec.podSelector.matchExpressions[0].key: Required value",
        id="expression-without-key",
    ),
    # gpuDevices
    pytest.param(
        _spec(gpuDevices=[]),
        "spec.gpuDevices: Invalid value: 0: spec.gpuDevices in body should have at least 1 items",
        id="gpuDevices-empty",
    ),
    pytest.param(
        _spec(gpuDevices=[f"gpu-{i}" for i in range(17)]),
        "spec.gpuDevices: Too many: 17: must have at most 16 items",
        id="gpuDevices-17",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0", "gpu-1", "gpu-0"]),
        'spec.gpuDevices[2]: Duplicate value: "gpu-0"',
        id="gpuDevices-duplicate",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-x"]),
        f"spec.gpuDevices[0]: Invalid value: \"gpu-x\": spec.gpuDevices[0] in body should match '{GPU_PATTERN}'",
        id="gpu-x",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0/0"]),
        f"spec.gpuDevices[0]: Invalid value: \"gpu-0/0\": spec.gpuDevices[0] in body should match '{GPU_PATTERN}'",
        id="gpu-0/0",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0/101"]),
        f"spec.gpuDevices[0]: Invalid value: \"gpu-0/101\": spec.gpuDevices[0] in body should match '{GPU_PATTERN}'",
        id="gpu-0/101",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-01"]),
        f"spec.gpuDevices[0]: Invalid value: \"gpu-01\": spec.gpuDevices[0] in body should match '{GPU_PATTERN}'",
        id="gpu-01",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0", "GPU-1"]),
        f"spec.gpuDevices[1]: Invalid value: \"GPU-1\": spec.gpuDevices[1] in body should match '{GPU_PATTERN}'",
        id="GPU-uppercase",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0/50", "gpu-1/30"]),
        f"spec.gpuDevices: Invalid value: {SAME_PERCENTAGE}",
        id="mixed-percentages",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0", "gpu-1/30"]),
        f"spec.gpuDevices: Invalid value: {SAME_PERCENTAGE}",
        id="whole-and-percentage",
    ),
    pytest.param(
        _spec(gpuDevices=["gpu-0/30", "gpu-1"]),
        f"spec.gpuDevices: Invalid value: {SAME_PERCENTAGE}",
        id="percentage-and-whole",
    ),
    # nodeName, evictPod
    pytest.param(
        _spec(nodeName="GPU-Node-1"),
        f"spec.nodeName: Invalid value: \"GPU-Node-1\": spec.nodeName in body should match '{DNS_SUBDOMAIN}'",
        id="nodeName-uppercase",
    ),
    pytest.param(
        _spec(evictPod="My_Pod"),
        f"spec.evictPod: Invalid value: \"My_Pod\": spec.evictPod in body should match '{DNS_SUBDOMAIN}'",
        id="evictPod-bad-name",
    ),
    # timeouts
    pytest.param(
        _spec(timeouts={"evictionSeconds": 0}),
        "spec.timeouts.evictionSeconds: Invalid value: 0: spec.timeouts.evictionSeconds in body should be greater "
        "than or equal to 1",
        id="evictionSeconds-0",
    ),
    pytest.param(
        _spec(timeouts={"replacementSeconds": 86401}),
        "spec.timeouts.replacementSeconds: Invalid value: 86401: spec.timeouts.replacementSeconds in body should be "
        "less than or equal to 86400",
        id="replacementSeconds-86401",
    ),
]


@pytest.mark.parametrize(("spec", "message"), BAD_SPECS)
def test_malformed_spec_is_rejected_with_message(custom, ns, spec, message) -> None:
    got = _rejection(lambda: _create(custom, ns, _placement(ns, spec)))
    assert message in got
    # Nothing was stored.
    assert custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)["items"] == []


def test_missing_spec_is_rejected(custom, ns) -> None:
    body = _placement(ns, _spec())
    del body["spec"]
    assert "spec: Required value" in _rejection(lambda: _create(custom, ns, body))


CEL_SKIPPED = (
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation"
)


def test_all_errors_are_reported_together(custom, ns) -> None:
    spec = _spec(reqID="abcd", nodeName="Node_1", gpuDevices=["gpu-0/50", "gpu-1/30"], podSelector={})
    got = _rejection(lambda: _create(custom, ns, _placement(ns, spec)))
    for part in (
        "spec.reqID in body should be at least 5 chars long",
        'spec.nodeName: Invalid value: "Node_1"',
        f"spec.gpuDevices: Invalid value: {SAME_PERCENTAGE}",
        f"spec.podSelector: Invalid value: {SELECTOR_EMPTY}",
    ):
        assert part in got


def test_cel_rules_are_skipped_when_a_size_bound_is_exceeded(custom, ns) -> None:
    # The apiserver only runs CEL on objects within the maxItems/maxLength its cost estimate assumed:
    # 17 mixed entries report "Too many" and that rules were skipped, not the percentage rule.
    spec = _spec(gpuDevices=[f"gpu-{i}/{10 + i % 2}" for i in range(17)])
    got = _rejection(lambda: _create(custom, ns, _placement(ns, spec)))
    assert "spec.gpuDevices: Too many: 17: must have at most 16 items" in got
    assert CEL_SKIPPED in got
    assert SAME_PERCENTAGE not in got


# ---- updates --------------------------------------------------------------------------------


def test_reqid_is_immutable_but_evictpod_may_change(custom, ns) -> None:
    _create(custom, ns, _doc_example(ns))
    args = (GROUP, VERSION, ns, PLURAL, "pin-gpu0")

    got = _rejection(lambda: custom.patch_namespaced_custom_object(*args, {"spec": {"reqID": "pin-gpu0-002"}}))
    assert 'spec.reqID: Invalid value: "pin-gpu0-002": reqID is immutable' in got

    current = custom.get_namespaced_custom_object(*args)
    replaced = copy.deepcopy(current)
    replaced["spec"]["reqID"] = "pin-gpu0-003"
    got = _rejection(lambda: custom.replace_namespaced_custom_object(*args, replaced))
    assert 'spec.reqID: Invalid value: "pin-gpu0-003": reqID is immutable' in got
    assert custom.get_namespaced_custom_object(*args)["spec"]["reqID"] == "pin-gpu0-001"

    patched = custom.patch_namespaced_custom_object(*args, {"spec": {"evictPod": "my-job-abc12"}})
    assert patched["spec"]["evictPod"] == "my-job-abc12"
    assert patched["spec"]["reqID"] == "pin-gpu0-001"
    assert patched["metadata"]["generation"] == 2

    # Unchanged reqID in a full replace is fine; so are timeouts edits.
    patched["spec"]["timeouts"]["evictionSeconds"] = 60
    replaced = custom.replace_namespaced_custom_object(*args, patched)
    assert replaced["spec"]["timeouts"]["evictionSeconds"] == 60
    assert replaced["metadata"]["generation"] == 3


def test_gpudevices_rules_apply_on_update_too(custom, ns) -> None:
    _create(custom, ns, _placement(ns, _spec(gpuDevices=["gpu-0/50", "gpu-1/50"])))
    args = (GROUP, VERSION, ns, PLURAL, "pin-gpu0")
    got = _rejection(
        lambda: custom.patch_namespaced_custom_object(*args, {"spec": {"gpuDevices": ["gpu-0/50", "gpu-1"]}})
    )
    assert f"spec.gpuDevices: Invalid value: {SAME_PERCENTAGE}" in got
    # The schema does not make gpuDevices immutable: that is the webhook's job once a pod is claimed.
    ok = custom.patch_namespaced_custom_object(*args, {"spec": {"gpuDevices": ["gpu-2/25", "gpu-3/25"]}})
    assert ok["spec"]["gpuDevices"] == ["gpu-2/25", "gpu-3/25"]


# ---- status subresource ---------------------------------------------------------------------

# Terminal phases only: an agent running against the same test bed reconciles live phases
# (a Bound placement whose pod does not exist becomes Failed), which is not what these tests test.
FULL_STATUS = {
    "phase": "Completed",
    "reason": "PodBound",
    "message": "pod my-job-abc12 bound to gpu-node-1 gpu-0",
    "conditions": [
        {
            "type": "Bound",
            "status": "True",
            "observedGeneration": 1,
            "lastTransitionTime": "2025-01-02T03:04:05Z",
            "reason": "PodBound",
            "message": "bound",
        }
    ],
    "boundPod": "my-job-abc12",
    "boundPodUID": "0f5e1c9a-3a5b-4d8e-9a51-1c2d3e4f5a6b",
    "claimedAt": "2025-01-02T03:04:00Z",
    "consumedAt": "2025-01-02T03:04:05Z",
    "claimLeaseExpiresAt": "2025-01-02T03:05:00Z",
    "evictedPod": "my-job-old12",
    "evictedPodUID": "6b5a4f3e-2d1c-4b9a-8e5d-a3c9e1f50f0a",
    "evictionAttempts": 3,
    "allocatedDevices": ["GPU-8a3c1f5e-0000-4000-8000-000000000000"],
    "targetUUIDs": ["GPU-8a3c1f5e-0000-4000-8000-000000000000"],
    "observedGeneration": 1,
}


def test_status_is_only_written_through_the_status_subresource(custom, ns) -> None:
    args = (GROUP, VERSION, ns, PLURAL, "pin-gpu0")
    body = _doc_example(ns)
    body["status"] = {"phase": "Completed"}
    created = _create(custom, ns, body)
    assert "status" not in created

    # Through the main resource: status is dropped, and the spec generation does not move.
    patched = custom.patch_namespaced_custom_object(*args, {"status": {"phase": "Completed"}})
    assert "status" not in patched
    assert patched["metadata"]["generation"] == 1

    # Through /status: stored as sent, and still no new generation.
    written = custom.patch_namespaced_custom_object_status(*args, {"status": FULL_STATUS})
    assert written["status"] == FULL_STATUS
    stored = custom.get_namespaced_custom_object(*args)
    assert stored["status"] == FULL_STATUS
    assert stored["metadata"]["generation"] == 1

    # ...and a spec sent to /status is ignored.
    again = custom.patch_namespaced_custom_object_status(*args, {"spec": {"evictPod": "sneaky"}})
    assert "evictPod" not in again["spec"]


@pytest.mark.parametrize(
    ("status", "message"),
    [
        pytest.param(
            {"phase": "Running"},
            'status.phase: Unsupported value: "Running": supported values: "Pending", "Claimed", "Bound", '
            '"Evicting", "WaitingForPod", "ScalingUp", "ScalingDown", "Completed", "Failed", "Cancelled"',
            id="unknown-phase",
        ),
        pytest.param(
            {"reason": "not camel case"},
            # Under /status the apiserver names only the leaf field in the "in body" part.
            'status.reason: Invalid value: "not camel case": reason in body should match '
            "'^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?)?$'",
            id="reason-with-spaces",
        ),
        pytest.param(
            {"message": "m" * 4097}, "status.message: Too long: may not be more than 4096 bytes", id="message-too-long"
        ),
        pytest.param(
            {"claimedAt": "yesterday"},
            'status.claimedAt: Invalid value: "yesterday": claimedAt in body must be of type date-time: "yesterday"',
            id="claimedAt-not-a-date",
        ),
        pytest.param(
            {"conditions": [FULL_STATUS["conditions"][0], FULL_STATUS["conditions"][0]]},
            'status.conditions[1]: Duplicate value: {"type":"Bound"}',
            id="duplicate-condition-type",
        ),
        pytest.param(
            {"conditions": [{**FULL_STATUS["conditions"][0], "status": "Yes"}]},
            'status.conditions[0].status: Unsupported value: "Yes": supported values: "True", "False", "Unknown"',
            id="condition-status-not-enum",
        ),
        pytest.param(
            {"targetUUIDs": [f"GPU-{i}" for i in range(17)]},
            "status.targetUUIDs: Too many: 17: must have at most 16 items",
            id="targetUUIDs-17",
        ),
    ],
)
def test_invalid_status_is_rejected(custom, ns, status, message) -> None:
    args = (GROUP, VERSION, ns, PLURAL, "pin-gpu0")
    _create(custom, ns, _doc_example(ns))
    got = _rejection(lambda: custom.patch_namespaced_custom_object_status(*args, {"status": status}))
    assert message in got
    assert "status" not in custom.get_namespaced_custom_object(*args)


# ---- field selectors and kubectl ------------------------------------------------------------


def test_spec_node_name_and_reqid_are_selectable_fields(custom, ns) -> None:
    _create(custom, ns, _doc_example(ns))
    _create(custom, ns, _placement(ns, _spec(reqID="other-0001", nodeName="gpu-node-2"), name="other"))

    def names(selector: str) -> list[str]:
        items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, field_selector=selector)["items"]
        return sorted(i["metadata"]["name"] for i in items)

    assert names("spec.nodeName=gpu-node-2") == ["other"]
    assert names("spec.reqID=pin-gpu0-001") == ["pin-gpu0"]
    assert names("spec.nodeName!=gpu-node-2") == ["pin-gpu0"]


def _kubectl(testbed, tmp_path: Path, *argv: str) -> str:
    cmd = [
        str(testbed.binaries["kubectl"]),
        "--kubeconfig",
        str(testbed.kubeconfig),
        "--cache-dir",
        str(tmp_path / "kube-cache"),
        *argv,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}): {done.stderr}"
    return done.stdout


def test_kubectl_printer_columns_category_and_explain(custom, ns, testbed, tmp_path) -> None:
    args = (GROUP, VERSION, ns, PLURAL, "pin-gpu0")
    _create(custom, ns, _placement(ns, _spec(evictPod="my-job-old12", gpuDevices=["gpu-0/50", "gpu-1/50"])))
    custom.patch_namespaced_custom_object_status(
        *args, {"status": {"phase": "Completed", "boundPod": "my-job-abc12", "message": "bound-to-target"}}
    )

    header, row = _kubectl(testbed, tmp_path, "get", "hpp", "-n", ns).splitlines()
    assert header.split() == ["NAME", "REQID", "NODE", "GPUS", "PHASE", "POD", "AGE"]
    cells = row.split()
    assert cells[:6] == [
        "pin-gpu0",
        "pin-gpu0-001",
        "gpu-node-1",
        '["gpu-0/50","gpu-1/50"]',
        "Completed",
        "my-job-abc12",
    ]

    header, row = _kubectl(testbed, tmp_path, "get", "hamipodplacements", "-n", ns, "-o", "wide").splitlines()
    assert header.split() == ["NAME", "REQID", "NODE", "GPUS", "PHASE", "POD", "AGE", "EVICT", "STRATEGY", "MESSAGE"]
    assert row.split()[-2:] == ["my-job-old12", "bound-to-target"]

    listed = _kubectl(testbed, tmp_path, "get", "hami", "-n", ns, "-o", "name")
    assert listed.split() == ["hamipodplacement.scheduling.hami.placement.com/pin-gpu0"]

    explained = " ".join(_kubectl(testbed, tmp_path, "explain", "hamipodplacement.spec.gpuDevices").split())
    assert "FIELD: gpuDevices <[]string>" in explained
    assert (
        "N (0-999, no leading zeros) is the GPU's NVML index as registered in the node's "
        "hami.io/node-nvidia-register annotation, NOT its position in that list." in explained
    )
    explained = " ".join(_kubectl(testbed, tmp_path, "explain", "hpp.spec.timeouts.evictionSeconds").split())
    assert "default 300" in explained
