"""The webhook benchmark's objects (bench/webhook_bench.py): realistic pods as the API server admits a
Deployment's GPU pod, their AdmissionReviews, and the placements that match them or not."""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

GROUP, VERSION, PLURAL = "scheduling.hami.placement.com", "v1", "hamipodplacements"
NODES = 4
GPUS_PER_NODE = 4


# ---- realistic objects ----------------------------------------------------------------------------
def pod_template(app: str, template_hash: str, extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A GPU inference pod as a Deployment's ReplicaSet controller POSTs it (before defaulting)."""
    labels = {
        "app": app,
        "app.kubernetes.io/part-of": "inference",
        "pod-template-hash": template_hash,
        "team": "ml-platform",
        **(extra_labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{app}-{template_hash}-",
            "labels": labels,
            "annotations": {"prometheus.io/port": "9400", "prometheus.io/scrape": "true"},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeSelector": {"gpu": "on"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "server",
                    "image": "nvcr.io/nvidia/tritonserver:24.05-py3",
                    "args": ["tritonserver", "--model-repository=/models", "--http-port=8000"],
                    "ports": [
                        {"name": "http", "containerPort": 8000, "protocol": "TCP"},
                        {"name": "metrics", "containerPort": 8002, "protocol": "TCP"},
                    ],
                    "env": [
                        {"name": "CUDA_VISIBLE_DEVICES_POLICY", "value": "hami"},
                        {"name": "MODEL_NAME", "value": "llama-3-8b"},
                        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "LOG_LEVEL", "value": "info"},
                    ],
                    "resources": {
                        "limits": {
                            "cpu": "8",
                            "memory": "32Gi",
                            "nvidia.com/gpu": "1",
                            "nvidia.com/gpucores": "50",
                            "nvidia.com/gpumem": "20000",
                        },
                        "requests": {"cpu": "4", "memory": "16Gi"},
                    },
                    "volumeMounts": [
                        {"name": "models", "readOnly": True, "mountPath": "/models"},
                        {"name": "dshm", "mountPath": "/dev/shm"},  # noqa: S108 - a pod spec
                    ],
                    "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": 8000}, "periodSeconds": 5},
                },
                {
                    "name": "metrics-sidecar",
                    "image": "registry.example.com/dcgm-exporter:3.3.5",
                    "env": [{"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"}],
                    "ports": [{"name": "dcgm", "containerPort": 9400, "protocol": "TCP"}],
                    "resources": {
                        "limits": {"cpu": "200m", "memory": "256Mi"},
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                    },
                },
            ],
            "volumes": [
                {"name": "models", "persistentVolumeClaim": {"claimName": "model-store", "readOnly": True}},
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
            ],
        },
    }


def _fields_v1(value: Any) -> dict[str, Any]:
    """A managedFields fieldsV1 set for `value`, keyed as the apiserver keys it (lists by name)."""
    if isinstance(value, dict):
        return {".": {}, **{f"f:{k}": _fields_v1(v) for k, v in value.items()}}
    if isinstance(value, list) and value and all(isinstance(x, dict) and "name" in x for x in value):
        return {".": {}, **{"k:" + json.dumps({"name": x["name"]}): _fields_v1(x) for x in value}}
    return {}


def admitted_pod(template: dict[str, Any], namespace: str) -> dict[str, Any]:
    """`template` as the mutating webhooks receive it: owner reference, managedFields and the
    defaults and admission-plugin additions (ServiceAccount volume, default tolerations) applied.
    Checked against a review captured from the test bed's apiserver: same fields, same size."""
    pod: dict[str, Any] = json.loads(json.dumps(template))
    meta, spec = pod["metadata"], pod["spec"]
    rs = meta["generateName"].rstrip("-")
    rs_uid = str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{rs}"))
    meta["namespace"] = namespace
    meta["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": rs,
            "uid": rs_uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    fields = {
        "f:metadata": {
            "f:annotations": _fields_v1(meta["annotations"]),
            "f:generateName": {},
            "f:labels": _fields_v1(meta["labels"]),
            "f:ownerReferences": {".": {}, "k:" + json.dumps({"uid": rs_uid}): {}},
        },
        "f:spec": {k: v for k, v in _fields_v1(spec).items() if k != "."},
    }
    meta["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-02T16:13:13Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": fields,
        }
    ]
    token_volume = f"kube-api-access-{secrets.token_hex(3)[:5]}"
    spec["volumes"].append(
        {
            "name": token_volume,
            "projected": {
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                }
                            ]
                        }
                    },
                ],
                "defaultMode": 420,
            },
        }
    )
    for c in spec["containers"]:
        c.setdefault("volumeMounts", []).append(
            {"name": token_volume, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        )
        c.update(
            terminationMessagePath="/dev/termination-log",
            terminationMessagePolicy="File",
            imagePullPolicy="IfNotPresent",
        )
        res = c.get("resources") or {}
        for k, v in (res.get("limits") or {}).items():  # extended resources: requests default to limits
            if "/" in k:
                res.setdefault("requests", {}).setdefault(k, v)
        for env in c.get("env") or ():
            if "valueFrom" in env:
                env["valueFrom"]["fieldRef"]["apiVersion"] = "v1"
        if "readinessProbe" in c:
            c["readinessProbe"]["httpGet"]["scheme"] = "HTTP"
            c["readinessProbe"].update(timeoutSeconds=1, successThreshold=1, failureThreshold=3)
    spec["tolerations"] += [
        {"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for t in ("not-ready", "unreachable")
    ]
    spec.update(
        restartPolicy="Always",
        terminationGracePeriodSeconds=30,
        dnsPolicy="ClusterFirst",
        serviceAccountName="default",
        serviceAccount="default",
        securityContext={},
        priority=0,
        enableServiceLinks=True,
        preemptionPolicy="PreemptLowerPriority",
    )
    pod["status"] = {}
    return pod


def admission_review(pod: dict[str, Any], namespace: str, dry_run: bool = False) -> dict[str, Any]:
    gvk = {"group": "", "version": "v1", "kind": "Pod"}
    gvr = {"group": "", "version": "v1", "resource": "pods"}
    return {
        "kind": "AdmissionReview",
        "apiVersion": "admission.k8s.io/v1",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": gvk,
            "resource": gvr,
            "requestKind": gvk,
            "requestResource": gvr,
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": str(uuid.uuid4()),
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/credential-id": [f"JTI={uuid.uuid4()}"]},
            },
            "object": pod,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }


def compact(doc: Any) -> str:
    return json.dumps(doc, separators=(",", ":"))  # the apiserver sends compact JSON


def placement(name: str, req_id: str, selector: dict[str, Any], node: str, gpus: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name},
        "spec": {"reqID": req_id, "podSelector": selector, "nodeName": node, "gpuDevices": gpus},
    }


def target(i: int) -> tuple[str, list[str]]:
    """Spread placements over the nodes and GPUs; every other one asks for a 25% share."""
    node = f"gpu-node-{i % NODES + 1}"
    gpu = f"gpu-{(i // NODES) % GPUS_PER_NODE}"
    return node, [gpu if i % 2 else f"{gpu}/25"]


def nomatch_selector(i: int) -> dict[str, Any]:
    """Selectors that fail on different keys against the benchmark pod, so each lookup does work."""
    kind = i % 3
    if kind == 0:  # the same Deployment's previous ReplicaSet: app matches, the hash does not
        return {"matchLabels": {"app": "llm-serve", "pod-template-hash": f"old{i:06d}"}}
    if kind == 1:
        return {"matchLabels": {"app": f"train-{i:05d}", "team": "ml-platform"}}
    return {
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["llm-serve", "llm-batch"]},
            {"key": "rank", "operator": "Exists"},
        ]
    }
