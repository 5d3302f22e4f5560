"""Pure logic of the agent: the pin patch, admission responses, config, the informer's 410 path, the claim
index and what a controller pass looks at."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.admission import Verdict, build_response, parse_review
from agent.cache import ClusterCache
from agent.claims import ClaimIndex, open_for_claims
from agent.config import ConfigError, Settings
from agent.controller import PlacementController
from agent.errors import InvalidRequest
from agent.informer import Informer
from hami_place_core import placement as hp
from hami_place_core.kube import errors as kube_errors
from hami_place_core.placement import Placement, pin_patch
from hami_place_core.selectors import SelectorError, matches
from hami_place_core.targets import parse_targets


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Minimal RFC 6902 `add` (the only op the pin uses), with ~0/~1 unescaping."""
    out = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] == "add"
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parts[:-1]:
            target = target[int(p)] if isinstance(target, list) else target[p]
        target[parts[-1]] = op["value"]
    return out


POD = {
    "metadata": {"generateName": "web-", "labels": {"app": "web"}},
    "spec": {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]},
                    ]
                }
            }
        },
        "containers": [
            {"name": "side", "resources": {}},
            {"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "cpu": "1"}}},
        ],
    },
}


def test_pin_patch_is_idempotent_and_ands_the_node_into_every_term() -> None:
    targets = parse_targets(["gpu-0/50", "gpu-3/50"])
    link = {"scheduling.hami.placement.com/claim": "abc"}
    ops = pin_patch(POD, "n1", ["GPU-a", "GPU-d"], targets, link)
    pinned = apply_patch(POD, ops)
    assert pinned["metadata"]["annotations"] == {"nvidia.com/use-gpuuuid": "GPU-a,GPU-d", **link}
    terms = pinned["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    pin = {"key": "metadata.name", "operator": "In", "values": ["n1"]}
    assert all(t["matchFields"] == [pin] for t in terms) and len(terms) == 2
    main = pinned["spec"]["containers"][1]["resources"]
    # /P replaces the memory request (gpumem would win over the percentage at Fit time)
    assert main["limits"] == {
        "nvidia.com/gpu": "2",
        "cpu": "1",
        "nvidia.com/gpumem-percentage": "50",
        "nvidia.com/gpucores": "50",
    }
    assert main["requests"] == {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem-percentage": "50",
        "nvidia.com/gpucores": "50",
    }
    assert pinned["spec"]["containers"][0]["resources"] == {}  # the sidecar asks for no GPU and gets none
    assert "nodeName" not in pinned["spec"]
    assert pin_patch(pinned, "n1", ["GPU-a", "GPU-d"], targets, link) == []  # reinvocation: nothing to do


def test_pin_patch_whole_gpu_keeps_the_pods_own_request() -> None:
    ops = pin_patch(POD, "n1", ["GPU-b"], parse_targets(["gpu-1"]), {})
    limits = apply_patch(POD, ops)["spec"]["containers"][1]["resources"]["limits"]
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4096", "cpu": "1"}


def test_pin_patch_on_a_pod_without_affinity_or_gpu_containers() -> None:
    pod = {"metadata": {}, "spec": {"containers": [{"name": "c"}]}}
    pinned = apply_patch(pod, pin_patch(pod, "n2", ["GPU-x"], parse_targets(["gpu-0"]), {"k": "v"}))
    assert pinned["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
    assert pinned["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]
    }


REVIEW = {
    "kind": "AdmissionReview",
    "apiVersion": "admission.k8s.io/v1",
    "request": {
        "uid": "u-1",
        "operation": "CREATE",
        "namespace": "ns",
        "object": {"metadata": {}},
        "userInfo": {"username": "alice"},
        "dryRun": True,
    },
}


def test_response_echoes_uid_and_carries_base64_jsonpatch() -> None:
    review = parse_review(json.dumps(REVIEW))
    assert review.dry_run and review.username == "alice"
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    out = build_response(review, Verdict(patch=ops, warnings=["w"]))
    resp = out["response"]
    assert out["apiVersion"] == "admission.k8s.io/v1" and out["kind"] == "AdmissionReview"
    assert resp["uid"] == "u-1" and resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(resp["patch"])) == ops and resp["warnings"] == ["w"]
    plain = build_response(review, Verdict())["response"]
    assert plain == {"uid": "u-1", "allowed": True}  # no patch, no patchType
    denied = build_response(review, Verdict(allowed=False, code=422, reason="Invalid", message="no"))["response"]
    assert denied["status"] == {"code": 422, "message": "no", "reason": "Invalid"}


def test_review_garbage_is_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match=r"request\.userInfo must be an object"):
        parse_review(json.dumps({**REVIEW, "request": {**REVIEW["request"], "userInfo": "root"}}))


def test_config_errors_name_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("HAMI_PLACE_PORT", "http")
    with pytest.raises(ConfigError, match="HAMI_PLACE_PORT='http' is not an integer"):
        Settings.from_env()
    monkeypatch.setenv("HAMI_PLACE_PORT", "8083")
    monkeypatch.setenv("HAMI_PLACE_TLS_CERT_FILE", "/x.crt")
    with pytest.raises(ConfigError, match="must be set together"):
        Settings.from_env()
    monkeypatch.delenv("HAMI_PLACE_TLS_CERT_FILE")
    monkeypatch.setenv("HAMI_PLACE_LEADER_ELECTION", "maybe")
    with pytest.raises(ConfigError, match="is not a boolean"):
        Settings.from_env()
    monkeypatch.setenv("HAMI_PLACE_LEADER_ELECTION", "true")
    monkeypatch.setenv("HAMI_PLACE_LEASE_NAME", "my_lease")
    with pytest.raises(ConfigError, match="must be a lowercase RFC 1123 subdomain"):
        Settings.from_env()
    monkeypatch.setenv("HAMI_PLACE_LEASE_NAME", "my-lease")
    monkeypatch.setenv("HAMI_PLACE_EXCLUDED_NAMESPACES", "kube-system, monitoring")
    s = Settings.from_env()
    assert s.leader_election and s.excluded_namespaces == ("kube-system", "monitoring")
    monkeypatch.setenv("HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE", "/ca.crt")
    with pytest.raises(ConfigError, match="HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE needs TLS"):
        Settings.from_env()
    monkeypatch.delenv("HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE")
    monkeypatch.setenv("HAMI_PLACE_WEBHOOK_CLIENT_NAMES", "kube-apiserver")
    with pytest.raises(ConfigError, match="HAMI_PLACE_WEBHOOK_CLIENT_NAMES needs HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE"):
        Settings.from_env()


def test_webhook_client_check_reads_the_verified_peer_subject() -> None:
    from agent.errors import Unauthenticated
    from agent.tls import require_webhook_client

    class Ssl:
        def __init__(self, cert: dict[str, Any] | None) -> None:
            self.cert = cert

        def getpeercert(self) -> dict[str, Any] | None:
            return self.cert

    class Transport:
        def __init__(self, cert: dict[str, Any] | None) -> None:
            self.ssl = Ssl(cert)

        def get_extra_info(self, name: str) -> Any:
            return self.ssl if name == "ssl_object" else None

    apiserver = {"subject": ((("commonName", "kube-apiserver-webhook-client"),), (("organizationName", "k8s"),))}
    other = {"subject": ((("commonName", "mallory"),),)}
    off = Settings()
    on = Settings(tls_cert_file="t", tls_key_file="k", webhook_client_ca_file="ca")
    named = Settings(
        tls_cert_file="t",
        tls_key_file="k",
        webhook_client_ca_file="ca",
        webhook_client_names=("kube-apiserver-webhook-client",),
    )
    require_webhook_client(off, Transport(None))  # off: nothing asked
    require_webhook_client(on, Transport(other))  # any certificate the CA verified
    require_webhook_client(named, Transport(apiserver))
    with pytest.raises(Unauthenticated, match="must present a client certificate"):
        require_webhook_client(on, Transport(None))
    with pytest.raises(Unauthenticated, match="must present a client certificate"):
        require_webhook_client(on, Transport({}))  # TLS without a certificate: getpeercert() is {}
    with pytest.raises(Unauthenticated, match="CN 'mallory' is not one of HAMI_PLACE_WEBHOOK_CLIENT_NAMES"):
        require_webhook_client(named, Transport(other))
    with pytest.raises(Unauthenticated):
        require_webhook_client(on, None)  # plain HTTP
    # the verdict belongs to the connection: decoded once, then read from its context
    from types import SimpleNamespace

    conn = SimpleNamespace()
    require_webhook_client(named, Transport(apiserver), conn)
    require_webhook_client(named, Transport(other), conn)  # same connection: the first verdict holds
    assert conn.webhook_client_verdict == ""
    refused = SimpleNamespace()
    for _ in range(2):
        with pytest.raises(Unauthenticated, match="mallory"):
            require_webhook_client(named, Transport(other), refused)


class FakeKube:
    """Lists return the current objects; the first watch delivers one event then a 410."""

    def __init__(self) -> None:
        self.objects = {"a": {"metadata": {"name": "a", "resourceVersion": "1"}}}
        self.lists = 0
        self.watches = 0

    async def list_all(self, path: str) -> tuple[list[dict[str, Any]], str]:
        self.lists += 1
        return list(self.objects.values()), str(10 * self.lists)

    async def watch(self, path: str, rv: str):  # type: ignore[no-untyped-def]
        self.watches += 1
        if self.watches == 1:
            yield {"type": "ADDED", "object": {"metadata": {"name": "b", "resourceVersion": "11"}}}
            # meanwhile "b" was deleted and "c" created, and the watch window expired
            self.objects["c"] = {"metadata": {"name": "c", "resourceVersion": "12"}}
            raise kube_errors.Gone("too old resource version", status=410)
        await asyncio.sleep(3600)
        yield {}


def test_informer_relists_on_410_and_reconciles_the_store() -> None:
    async def scenario() -> tuple[Informer, FakeKube, list[tuple[str, str]]]:
        kube = FakeKube()
        inf = Informer(kube, "/x", "things")  # type: ignore[arg-type]
        seen: list[tuple[str, str]] = []
        inf.subscribe(lambda kind, obj, old: seen.append((kind, obj["metadata"]["name"])))
        task = asyncio.create_task(inf.run())
        await asyncio.wait_for(inf.wait_synced(), 2)
        while kube.lists < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
        task.cancel()
        return inf, kube, seen

    inf, kube, seen = asyncio.run(scenario())
    assert kube.lists == 2 and inf.relists == 2
    assert set(inf.keys()) == {"a", "c"}  # b, seen only on the watch, is gone after the relist
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("DELETED", "b")]
    assert inf.resource_version == "20"


# ---- the claim index (the mutating webhook's lookup) ----------------------------------------------

_KEYS = st.sampled_from(["app", "team", "rank", "pod-template-hash"])
_VALUES = st.sampled_from(["a", "b", "c"])
_EXPR = st.builds(
    lambda k, op, vs: {"key": k, "operator": op, "values": vs},
    _KEYS,
    st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Bogus"]),
    st.lists(_VALUES, max_size=3),
)
_SELECTOR = st.fixed_dictionaries(
    {},
    optional={
        "matchLabels": st.dictionaries(_KEYS, _VALUES, max_size=3),
        "matchExpressions": st.lists(_EXPR, max_size=3),
    },
)
_PLACEMENT = st.tuples(
    st.sampled_from(["p1", "p2", "p3", "p4", "p5", "p6"]),
    st.sampled_from(["ns1", "ns2"]),
    _SELECTOR,
    st.sampled_from(["Pending", "Claimed", "WaitingForPod", "Evicting", "Completed"]),
    st.booleans(),  # a move
    st.booleans(),  # a bad target
)


def _placement(name: str, ns: str, selector: dict[str, Any], phase: str, move: bool, bad: bool) -> Placement:
    return Placement.from_object(
        {
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": "2025-01-01T00:00:00Z"},
            "spec": {
                "reqID": name,
                "podSelector": selector,
                "nodeName": "n",
                "gpuDevices": ["gpu-x" if bad else "gpu-0"],
                **({"evictPod": "old"} if move else {}),
            },
            "status": {"phase": phase, "workload": "ns1/ReplicaSet/rs"},
        }
    )


def _selects(p: Placement, labels: dict[str, str]) -> bool:
    try:
        return matches(p.selector, labels)
    except SelectorError:
        return False


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), _PLACEMENT), max_size=25),  # (delete?, placement) events
    st.dictionaries(_KEYS, _VALUES, max_size=4),
)
def test_claim_index_finds_exactly_what_a_scan_finds(events: list[Any], labels: dict[str, str]) -> None:
    index = ClaimIndex()
    live: dict[tuple[str, str], Placement] = {}
    for delete, spec in events:
        p = _placement(*spec)
        if delete:
            index.remove(p.namespace, p.name)
            live.pop((p.namespace, p.name), None)
        else:
            index.update(p)
            live[(p.namespace, p.name)] = p
    for ns in ("ns1", "ns2", "ns3"):
        want = {p.name for (n, _), p in live.items() if n == ns and open_for_claims(p) and _selects(p, labels)}
        got = [p.name for p in index.candidates(ns, labels)]
        assert sorted(got) == sorted(want)  # and no placement twice


def test_claim_index_files_a_shared_pair_once_and_the_rest_under_their_own_pairs() -> None:
    index = ClaimIndex()
    for i in range(50):  # each ReplicaSet's placement: app=web and its own pod-template-hash
        index.update(_placement(f"p{i}", "ns", {"matchLabels": {"app": "web", "h": f"h{i}"}}, "Pending", False, False))
    # a pod of ReplicaSet h7 reaches its own placement and at most one other through app=web
    ns = index._by_ns["ns"]
    assert len(ns.lookup({"app": "web", "h": "h7"})) <= 2
    assert [p.name for p in index.candidates("ns", {"app": "web", "h": "h7"})] == ["p7"]
    assert index.candidates("ns", {"app": "web", "h": "h7", "x": 1}) != []  # non-string labels are harmless
    assert index.candidates("ns", "not a mapping") == []  # type: ignore[arg-type]


def test_review_parser_rejects_what_orjson_rejects() -> None:
    for body, message in (
        (b"\xff\xfe", "not JSON"),
        (b'{"kind": NaN}', "not JSON"),
        (b"[" * 2000 + b"]" * 2000, "not JSON"),
        (b"", "not JSON"),
    ):
        with pytest.raises(InvalidRequest, match=message):
            parse_review(body)


def test_controller_passes_look_at_what_changed_and_at_expired_leases() -> None:
    async def scenario() -> None:
        cache = ClusterCache(None)  # type: ignore[arg-type]  # no API calls: events are applied by hand
        ctl = PlacementController(Settings(), cache, None, None)  # type: ignore[arg-type]

        def put(name: str, phase: str, lease: str = "", move: bool = False) -> None:
            status = {"phase": phase, **({"claimLeaseExpiresAt": lease} if lease else {})}
            spec = {"reqID": name, "podSelector": {"matchLabels": {"app": name}}, "nodeName": "n"}
            obj = {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}, "status": status}
            cache.apply(
                "placements",
                {"type": "MODIFIED", "object": {**obj, "spec": {**spec, **({"evictPod": "x"} if move else {})}}},
            )

        put("old", hp.CLAIMED, lease="2000-01-01T00:00:00Z")
        put("later", hp.CLAIMED, lease="2999-01-01T00:00:00Z")
        put("mv", hp.PENDING, move=True)
        assert ctl._due() == {"ns/old", "ns/later", "ns/mv"}  # the first pass looks at everything
        assert ctl._due() == {"ns/mv", "ns/old"}  # then moves, and leases that expired
        assert ctl._due() == {"ns/mv"}
        pod = {"metadata": {"name": "p", "namespace": "ns", "annotations": {hp.POD_PLACEMENT: "later"}}}
        cache.apply("pods", {"type": "ADDED", "object": pod})
        assert ctl._due() == {"ns/mv", "ns/later"}  # a pod that names its placement
        put("mv", hp.COMPLETED, move=True)
        assert ctl._due() == {"ns/mv"}  # changed once more, then finished: no longer every pass
        assert ctl._due() == set()
        cache.apply("namespaces", {"type": "MODIFIED", "object": {"metadata": {"name": "ns", "labels": {"a": "b"}}}})
        assert ctl._due() == {"ns/old", "ns/later", "ns/mv"}

    asyncio.run(scenario())


def test_a_placement_deleted_before_it_ended_leaves_nothing_in_the_phase_timer() -> None:
    """hami_place_phase_seconds remembers when each placement entered its phase; one deleted while
    Pending or Claimed must not stay in that table for the life of the process."""

    async def scenario() -> None:
        cache = ClusterCache(None)  # type: ignore[arg-type]  # no API calls: events are applied by hand
        ctl = PlacementController(Settings(), cache, None, None)  # type: ignore[arg-type]
        obj = {
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"reqID": "abcde", "podSelector": {"matchLabels": {"app": "a"}}, "nodeName": "n"},
            "status": {"phase": hp.CLAIMED},
        }
        cache.apply("placements", {"type": "ADDED", "object": obj})
        ctl.transitions._entered["ns/p"] = (hp.CLAIMED, 0.0)  # as _time_phases records it
        ctl.transitions._entered["ns/other"] = (hp.PENDING, 0.0)
        cache.apply("placements", {"type": "DELETED", "object": obj})
        assert ctl.transitions._entered == {"ns/other": (hp.PENDING, 0.0)}

    asyncio.run(scenario())


def test_webhook_client_ca_is_the_only_trust_root_for_client_certificates(tmp_path) -> None:
    import ssl

    from agent.tls import server_context
    from testbed.controlplane.certs import CertificateAuthority

    crt, key = CertificateAuthority("serving").issue_server(["127.0.0.1"]).write(tmp_path, "tls")
    client_ca = CertificateAuthority("apiserver-webhook-client-ca")
    (tmp_path / "ca.crt").write_bytes(client_ca.cert_pem)
    tls = server_context(Settings(tls_cert_file=str(crt), tls_key_file=str(key)))
    assert tls is not None
    plain = tls.current
    assert plain.verify_mode == ssl.CERT_NONE and plain.get_ca_certs() == []
    tls = server_context(
        Settings(tls_cert_file=str(crt), tls_key_file=str(key), webhook_client_ca_file=str(tmp_path / "ca.crt"))
    )
    assert tls is not None
    enforced = tls.current
    assert enforced.verify_mode == ssl.CERT_OPTIONAL
    # exactly our CA: no system roots, whose public certificates would otherwise pass as the API server
    assert [c["subject"] for c in enforced.get_ca_certs()] == [((("commonName", "apiserver-webhook-client-ca"),),)]
    assert server_context(Settings()) is None


def test_agent_exits_2_with_the_reason_when_the_webhook_client_ca_cannot_be_read(tmp_path) -> None:
    import subprocess
    import sys

    from testbed.controlplane.certs import CertificateAuthority

    crt, key = CertificateAuthority("serving").issue_server(["127.0.0.1"]).write(tmp_path, "tls")
    env = {
        "PATH": "/usr/bin:/bin",
        "HAMI_PLACE_TLS_CERT_FILE": str(crt),
        "HAMI_PLACE_TLS_KEY_FILE": str(key),
        "HAMI_PLACE_WEBHOOK_CLIENT_CA_FILE": str(tmp_path / "missing-ca.crt"),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "agent"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("hami-place agent: cannot load TLS files:") and "No such file" in proc.stderr


@pytest.mark.parametrize(
    ("env", "reason"),
    [
        ({}, "not in a pod: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set"),
        ({"HAMI_PLACE_KUBECONFIG": "/nonexistent/kubeconfig"}, "/nonexistent/kubeconfig"),
    ],
)
def test_agent_exits_2_in_one_line_without_kubernetes_credentials(env, reason) -> None:
    """As a container started outside a pod (or with a wrong kubeconfig) would: the reason, no traceback."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "agent"],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("hami-place agent: no usable Kubernetes credentials:"), proc.stderr
    assert reason in proc.stderr and "Traceback" not in proc.stderr


def _constraint_case(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """check_target's problems for moving web-1 (on n2, with `spec`) to gpu-0 of n1 (labelled
    pool=infer, tainted dedicated=infer:NoSchedule)."""
    from agent.validate import check_target
    from hami_place_core.annotations import POD_VGPU_NODE, GpuDevice
    from hami_place_core.placement import Placement
    from testbed.hami.simulate import gpu_uuid, node_manifest

    cache = ClusterCache(None)  # type: ignore[arg-type]  # no API calls: events are applied by hand
    gpu = GpuDevice(
        uuid=gpu_uuid("n1", 0), index=0, count=10, devmem=81920, devcore=100, type="NVIDIA-A100", health=True
    )
    node = node_manifest("n1", [gpu], labels={"pool": "infer"})
    node["spec"]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    cache.apply("nodes", {"type": "ADDED", "object": node})
    web = {
        "metadata": {
            "name": "web-1",
            "namespace": "ns",
            "labels": {"app": "web"},
            "annotations": {POD_VGPU_NODE: "n2", **(annotations or {})},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-5c", "controller": True}],
        },
        "spec": {
            "nodeName": "n2",
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            **spec,
        },
        "status": {"phase": "Running"},
    }
    cache.apply("pods", {"type": "ADDED", "object": web})
    spec_ = {
        "reqID": "abcde",
        "podSelector": {"matchLabels": {"app": "web"}},
        "nodeName": "n1",
        "gpuDevices": ["gpu-0"],
    }
    placement = Placement.from_object(
        {"metadata": {"name": "p", "namespace": "ns"}, "spec": {**spec_, "evictPod": "web-1"}}
    )
    return [(str(x.code), x.message) for x in check_target(cache, placement, [])]


TOLERATES = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"}]}


def test_validation_refuses_a_target_the_pods_tolerations_and_node_selectors_exclude() -> None:
    """kube-scheduler's TaintToleration and NodeAffinity filters: the pin is ANDed into the pod's
    own constraints, so a node they exclude would leave the replacement Pending forever."""
    taint = "pod ns/web-1 cannot run on node n1: taint dedicated=infer:NoSchedule is not tolerated"
    assert _constraint_case({}) == [("NodeConstraints", taint)]
    assert _constraint_case(TOLERATES) == []
    assert _constraint_case({**TOLERATES, "nodeSelector": {"pool": "train"}}) == [
        ("NodeConstraints", "pod ns/web-1 cannot run on node n1: nodeSelector pool=train does not match")
    ]
    elsewhere = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]}
    ]}}}  # fmt: skip
    assert _constraint_case({**TOLERATES, "affinity": elsewhere}) == [
        ("NodeConstraints", "pod ns/web-1 cannot run on node n1: required node affinity does not match")
    ]


def test_validation_ignores_an_earlier_placements_pin_on_the_pod_being_moved() -> None:
    """A pod an earlier placement pinned to n2 carries that pin only on itself; its replacement is
    built from the template, so the pin does not keep it off n1."""
    from hami_place_core.placement import POD_NODE, POD_PLACEMENT

    pinned = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}
    ]}}}  # fmt: skip
    assert _constraint_case({**TOLERATES, "affinity": pinned}, {POD_PLACEMENT: "ns/old", POD_NODE: "n2"}) == []
    assert _constraint_case({**TOLERATES, "affinity": pinned})[0][0] == "NodeConstraints"  # not ours: it binds


def test_validation_rejects_a_target_node_without_cpu_for_the_pod() -> None:
    """The GPUs have room but the node's CPU is taken by a non-GPU pod: kube-scheduler would leave
    the pinned pod Pending, so the placement is refused with the shortfall."""
    from agent.validate import check_target
    from hami_place_core.annotations import GpuDevice
    from hami_place_core.placement import Placement
    from hami_place_core.problems import Code
    from testbed.hami.simulate import gpu_uuid, node_manifest

    cache = ClusterCache(None)  # type: ignore[arg-type]  # no API calls: events are applied by hand
    devices = [
        GpuDevice(uuid=gpu_uuid("n1", 0), index=0, count=10, devmem=81920, devcore=100, type="NVIDIA-A100", health=True)
    ]
    cache.apply("nodes", {"type": "ADDED", "object": node_manifest("n1", devices, cpu_milli=8000, memory_mib=65536)})
    hog = {
        "metadata": {"name": "hog", "namespace": "other"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "7"}}}]},
        "status": {"phase": "Running"},
    }
    web = {
        "metadata": {"name": "web-1", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {
            "nodeName": "n2",
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}, "limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }
    for pod in (hog, web):
        cache.apply("pods", {"type": "ADDED", "object": pod})
    placement = Placement.from_object(
        {
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "reqID": "abcde",
                "podSelector": {"matchLabels": {"app": "web"}},
                "nodeName": "n1",
                "gpuDevices": ["gpu-0"],
            },
        }
    )
    assert [(x.code, x.message) for x in check_target(cache, placement, [])] == [
        (Code.NO_NODE_ROOM, "node n1 has no room for the pod: Insufficient cpu (1 free, 2 requested)")
    ]
    cache.apply("pods", {"type": "DELETED", "object": hog})
    assert check_target(cache, placement, []) == []


def test_a_missing_policy_crd_stops_the_autopilot_only_not_readiness() -> None:
    """`helm upgrade` does not install new CRDs: without HamiDefragPolicy the webhooks must stay up."""

    async def go() -> None:
        cache = ClusterCache(None, policies=True)  # type: ignore[arg-type]  # no API calls
        for resource, inf in cache._informers.items():  # the sync flags, set by hand
            if resource != "policies":
                inf._synced.set()
        assert cache.ready and await cache.wait_ready(0.1)
        status = {s.name: s.synced for s in cache.sync_status()}
        assert status["policies"] is False and cache.is_optional("policies")

    asyncio.run(go())


def _served_by(tls, ca) -> bool:
    """Whether a TLS client that trusts only `ca` completes a handshake with a listener holding
    `tls.context` (what the agent's listener holds)."""
    import socket
    import ssl
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve() -> None:
        conn, _ = srv.accept()
        try:
            tls.context.wrap_socket(conn, server_side=True).close()
        except (ssl.SSLError, OSError):
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        with socket.create_connection(("127.0.0.1", port)) as raw, client.wrap_socket(raw, server_hostname="127.0.0.1"):
            return True
    except ssl.SSLError:
        return False
    finally:
        t.join(5)
        srv.close()


def test_serving_certificate_follows_its_files_and_a_half_written_pair_keeps_the_old_one(tmp_path) -> None:
    from agent import metrics
    from agent.tls import server_context
    from testbed.controlplane.certs import CertificateAuthority

    old_ca, new_ca = CertificateAuthority("old"), CertificateAuthority("new")
    crt, key = old_ca.issue_server(["127.0.0.1"]).write(tmp_path, "tls")
    tls = server_context(Settings(tls_cert_file=str(crt), tls_key_file=str(key)))
    assert tls is not None and _served_by(tls, old_ca) and not _served_by(tls, new_ca)
    assert tls.reload() is False  # nothing changed

    failed = metrics.CERT_RELOADS.labels(result="failed")._value.get()
    fresh = new_ca.issue_server(["127.0.0.1"])
    fresh_crt, fresh_key = fresh.write(tmp_path, "fresh")
    crt.write_bytes(fresh_crt.read_bytes())  # the certificate first: it does not match the old key
    assert tls.reload() is False and metrics.CERT_RELOADS.labels(result="failed")._value.get() == failed + 1
    assert _served_by(tls, old_ca)  # the previous pair still serves
    key.write_bytes(fresh_key.read_bytes())
    assert tls.reload() is True and _served_by(tls, new_ca) and not _served_by(tls, old_ca)


def test_log_lines_about_a_placement_carry_its_fields_as_keys() -> None:
    import json
    import logging

    from agent.logs import JsonFormatter, fields
    from hami_place_core.placement import Placement
    from testbed.data.placements import placement

    body = placement("mv", "move-00001", {"app": "web"}, "gpu-node-3", ["gpu-1"], evict="web-1")
    body["metadata"]["namespace"] = "ml"
    p = Placement.from_object(body)
    record = logging.LogRecord("hami_place.agent.transitions", logging.INFO, __file__, 1, "moved %s", ("x",), None)
    for key, value in fields(p, phase="Evicting").items():
        setattr(record, key, value)
    record.secret = "never shown"  # only the known structured keys reach the line
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "moved x"
    assert {k: line[k] for k in ("placement", "reqID", "node", "pod", "phase")} == {
        "placement": "ml/mv",
        "reqID": "move-00001",
        "node": "gpu-node-3",
        "pod": "ml/web-1",
        "phase": "Evicting",
    }
    assert "secret" not in line
