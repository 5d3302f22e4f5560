"""The built `kubectl-hami_place` binary end to end, on the test bed with the agent running.

The agent is reached the way the CLI reaches it in a cluster: through the API server's service
proxy (a Service in kube-system named like the chart's, with Endpoints at the local agent), with
the test bed's client-certificate kubeconfig, so no bearer token reaches the agent.
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from typing import Any

import pytest
from kubernetes import client

from hami_place_core import annotations as ann
from hami_place_core import placement as hp
from testbed.controlplane.waiting import running_pods, wait_for
from testbed.data.gpu_nodes import NodeSpec
from testbed.data.placements import get_placement
from testbed.data.workloads import deployment
from tests.cli.live import Live

pytestmark = pytest.mark.testbed
# Tests whose pods HAMi schedules and allocates are marked `hami`: they run in both modes.

FALLBACK_NOTE = "following the placement object instead"


def placements(api: Any, ns: str) -> list[dict[str, Any]]:
    return list(
        client.CustomObjectsApi(api).list_namespaced_custom_object(hp.GROUP, hp.VERSION, ns, hp.PLURAL)["items"]
    )


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected a one-line cause on stderr, got: {stderr!r}"
    assert "Traceback" not in stderr
    return lines[0]


def created_name(stdout: str) -> str:
    first = stdout.splitlines()[0]  # "placement <ns>/<name> created (reqID ...)"
    return first.split()[1].split("/")[1]


@pytest.mark.hami
def test_pin_waits_until_the_next_pod_lands_on_the_target(live: Live) -> None:
    apps, core = client.AppsV1Api(live.api), client.CoreV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("pinme", replicas=0))
    target = live.targets[0]
    proc = live.popen(
        "pin", "deploy/pinme", "-n", live.ns, "--node", target.name, "--gpu", "gpu-3", "-w", "--timeout", "90s"
    )
    wait_for("the placement to exist", lambda: placements(live.api, live.ns), 30)
    apps.patch_namespaced_deployment_scale("pinme", live.ns, {"spec": {"replicas": 1}})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, (out, err)
    assert FALLBACK_NOTE not in err, err  # progress came from the agent's stream
    assert "pins the next pod of Deployment" in out and "Completed" in out, out
    pod = wait_for("the pinned pod Running", lambda: running_pods(core, live.ns, "app=pinme"), 30)[0]
    assert pod.spec.node_name == target.name
    assert pod.metadata.annotations[ann.USE_GPU_UUID] == target.gpu_uuid(3)
    name = created_name(out)
    assert get_placement(live.api, live.ns, name)["status"]["boundPod"] == pod.metadata.name


@pytest.mark.hami
def test_move_evict_streams_progress_until_completed(live: Live) -> None:
    apps, core = client.AppsV1Api(live.api), client.CoreV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("mover", replicas=1))
    victim = wait_for("a Running pod", lambda: running_pods(core, live.ns, "app=mover"), 60)[0]
    target = live.targets[1]
    result = live.run(
        "move",
        victim.metadata.name,
        "-n",
        live.ns,
        "--node",
        target.name,
        "--gpu",
        "gpu-1",
        "--evict",
        "--timeout",
        "2m",
    )
    assert result.returncode == 0, (result.stdout, result.stderr)
    assert FALLBACK_NOTE not in result.stderr, result.stderr
    out = result.stdout
    # non-TTY output: timestamped lines, one per state change, in order
    phases = [line.split()[1] for line in out.splitlines() if line[:4].isdigit()]
    assert phases[-1] == "Completed", out
    # the eviction itself may finish before the stream opens; later states are always streamed
    assert len(phases) >= 2 and "Completed" not in phases[:-1], out
    assert f"evicts pod {victim.metadata.name}" in out
    pod = wait_for(
        "the replacement Running",
        lambda: [p for p in running_pods(core, live.ns, "app=mover") if p.metadata.name != victim.metadata.name],
        30,
    )[0]
    assert pod.spec.node_name == target.name
    assert pod.metadata.annotations[ann.USE_GPU_UUID] == target.gpu_uuid(1)


@pytest.mark.hami
def test_status_watch_follows_a_placement_to_completed(live: Live) -> None:
    apps = client.AppsV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("watched", replicas=0))
    target = live.targets[0]
    created = live.run("pin", "deploy/watched", "-n", live.ns, "--node", target.name, "--gpu", "gpu-2/50")
    assert created.returncode == 0, created.stderr
    name = created_name(created.stdout)
    listed = live.run("status", "-n", live.ns, "-o", "wide")
    assert listed.returncode == 0 and name in listed.stdout and "Pending" in listed.stdout, listed.stdout
    proc = live.popen("status", name, "-n", live.ns, "-w")
    assert proc.stdout is not None
    first = proc.stdout.readline() + proc.stdout.readline()  # header and the Pending row: the list is done
    apps.patch_namespaced_deployment_scale("watched", live.ns, {"spec": {"replicas": 1}})
    rest, err = proc.communicate(timeout=90)
    out = first + rest
    assert proc.returncode == 0, (out, err)
    rows = [line.split() for line in out.splitlines() if line.startswith(name)]
    assert rows[0][1] == "Pending" and rows[-1][1] == "Completed", out
    assert len(rows) >= 2 and out.splitlines()[0].split()[:2] == ["NAME", "PHASE"]
    as_json = json.loads(live.run("status", name, "-n", live.ns, "-o", "json").stdout)
    assert as_json["kind"] == "List" and as_json["items"][0]["kind"] == "HamiPodPlacement"
    placed = as_json["items"][0]
    assert placed["status"]["phase"] == "Completed" and placed["spec"]["gpuDevices"] == ["gpu-2/50"]


def test_cancel_withdraws_a_pending_placement_and_refuses_a_finished_one(live: Live) -> None:
    client.AppsV1Api(live.api).create_namespaced_deployment(live.ns, deployment("cancelme", replicas=0))
    created = live.run("pin", "deploy/cancelme", "-n", live.ns, "--node", live.targets[0].name, "--gpu", "gpu-0")
    name = created_name(created.stdout)
    done = live.run("cancel", name, "-n", live.ns)
    assert done.returncode == 0 and "cancelled (was Pending)" in done.stdout, (done.stdout, done.stderr)
    assert name not in {p["metadata"]["name"] for p in placements(live.api, live.ns)}
    again = live.run("cancel", name, "-n", live.ns)
    assert again.returncode == 1 and one_line_error(again.stderr) == f"error: placement {live.ns}/{name} not found"


# ---- error cases: documented exit code, one-line cause on stderr ---------------------------------------------


def test_bad_gpu_syntax_is_a_usage_error(live: Live) -> None:
    r = live.run("pin", "deploy/x", "-n", live.ns, "--node", live.targets[0].name, "--gpu", "gpu-x")
    assert r.returncode == 2, r
    assert "'gpu-x' is not gpu-N or gpu-N/P" in r.stderr and "Traceback" not in r.stderr
    assert not placements(live.api, live.ns) or all(
        p["spec"]["gpuDevices"] != ["gpu-x"] for p in placements(live.api, live.ns)
    )


def test_unknown_node_and_missing_gpu(live: Live) -> None:
    client.AppsV1Api(live.api).create_namespaced_deployment(live.ns, deployment("nonode", replicas=0))
    r = live.run("pin", "deploy/nonode", "-n", live.ns, "--node", "no-such-node", "--gpu", "gpu-0")
    assert r.returncode == 1 and one_line_error(r.stderr) == "error: node no-such-node not found"
    r = live.run("pin", "deploy/nonode", "-n", live.ns, "--node", live.targets[0].name, "--gpu", "gpu-7")
    assert r.returncode == 1
    assert one_line_error(r.stderr) == (
        f"error: node {live.targets[0].name} has no GPU with index 7 (it has: 0, 1, 2, 3)"
    )


@pytest.mark.hami
def test_unreachable_agent_falls_back_to_watching_the_object(live: Live) -> None:
    apps, core = client.AppsV1Api(live.api), client.CoreV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("noagent", replicas=1))
    victim = wait_for("a Running pod", lambda: running_pods(core, live.ns, "app=noagent"), 60)[0]
    r = live.run(
        "move",
        victim.metadata.name,
        "-n",
        live.ns,
        "--node",
        live.targets[1].name,
        "--gpu",
        "gpu-3",
        "--evict",
        "--agent-service",
        "no-such-agent",
    )
    assert r.returncode == 0, (r.stdout, r.stderr)
    notes = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(notes) == 1 and FALLBACK_NOTE in notes[0] and "no-such-agent" in notes[0], r.stderr
    assert r.stdout.rstrip().splitlines()[-1].split()[1] == "Completed"


def test_the_agent_is_found_by_its_label_whatever_the_release_is_called(live: Live) -> None:
    """Issue 40: `--agent-service` defaulted to gpu-descheduler-webhook, so `helm install hami-place
    ./chart` silently lost live progress. The same agent behind a second release's Service name,
    in a namespace of its own, is found by the chart's label: progress streams through the API
    server's service proxy (no fallback note) with only --agent-namespace given."""
    from testbed.agents.agent_process import expose_agent_service

    core, apps = client.CoreV1Api(live.api), client.AppsV1Api(live.api)
    release_ns = f"{live.ns[:40]}-rel"
    core.create_namespace({"metadata": {"name": release_ns}})
    try:
        expose_agent_service(live.api, live.agents.agent, release_ns, "hami-place-webhook")
        apps.create_namespaced_deployment(live.ns, deployment("renamed", replicas=1))
        victim = wait_for("a Running pod", lambda: running_pods(core, live.ns, "app=renamed"), 60)[0]
        target = ["--node", live.targets[2].name, "--gpu", "gpu-2", "--evict", "--agent-namespace", release_ns]
        r = live.run("move", victim.metadata.name, "-n", live.ns, *target)
        assert r.returncode == 0, (r.stdout, r.stderr)
        assert FALLBACK_NOTE not in r.stderr and not r.stderr.strip(), r.stderr
        assert r.stdout.rstrip().splitlines()[-1].split()[1] == "Completed"
    finally:
        core.delete_namespace(release_ns)


def test_unreachable_api_server_is_a_one_line_error(live: Live, tmp_path) -> None:
    dead = live.testbed.write_token_kubeconfig(tmp_path / "dead.kubeconfig", "nobody", "x")
    text = dead.read_text().replace(live.testbed.server, "https://127.0.0.1:1")
    dead.write_text(text)
    r = live.run("status", "-n", live.ns, kubeconfig=dead, timeout=60)
    assert r.returncode == 1
    assert one_line_error(r.stderr).startswith("error: cannot reach the Kubernetes API server at https://127.0.0.1:1")


def test_forbidden_user_gets_exit_1_and_the_reason(live: Live, tmp_path) -> None:
    from testbed.agents.tokens import sa_token

    kubeconfig = live.testbed.write_token_kubeconfig(
        tmp_path / "nobody.kubeconfig", "nobody", sa_token(live.api, live.ns, "nobody")
    )
    r = live.run("status", "-n", live.ns, kubeconfig=kubeconfig)
    assert r.returncode == 1
    line = one_line_error(r.stderr)
    assert "forbidden" in line.lower() and "hamipodplacements" in line, line


@pytest.mark.hami
def test_move_that_a_pdb_blocks_past_its_deadline_fails_with_the_reason(live: Live) -> None:
    apps, core, policy = client.AppsV1Api(live.api), client.CoreV1Api(live.api), client.PolicyV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("guarded", replicas=1))
    policy.create_namespaced_pod_disruption_budget(
        live.ns,
        {
            "metadata": {"name": "guarded-pdb"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )
    victim = wait_for("a Running pod", lambda: running_pods(core, live.ns, "app=guarded"), 60)[0]
    wait_for(
        "the PDB to observe the pod",
        lambda: (
            (policy.read_namespaced_pod_disruption_budget("guarded-pdb", live.ns).status.observed_generation or 0) >= 1
        ),
        30,
    )
    r = live.run(
        "move",
        victim.metadata.name,
        "-n",
        live.ns,
        "--node",
        live.targets[0].name,
        "--gpu",
        "gpu-1",
        "--evict",
        "--eviction-timeout",
        "3s",
        "--timeout",
        "90s",
    )
    assert r.returncode == 1, (r.stdout, r.stderr)
    line = one_line_error(r.stderr)
    assert line.startswith("error: placement ") and "failed (BlockedByPDB)" in line and "guarded-pdb" in line, line
    assert "waiting: PDB guarded-pdb allows 0 disruptions" in r.stdout  # the wait was streamed as it happened
    assert core.read_namespaced_pod(victim.metadata.name, live.ns).metadata.deletion_timestamp is None


def test_ctrl_c_leaves_the_placement_and_says_how_to_follow_it(live: Live) -> None:
    client.AppsV1Api(live.api).create_namespaced_deployment(live.ns, deployment("interrupted", replicas=0))
    proc = live.popen(
        "pin", "deploy/interrupted", "-n", live.ns, "--node", live.targets[0].name, "--gpu", "gpu-0", "-w"
    )
    # This test's own placement: the namespace is the module's, and earlier tests leave theirs, so
    # waiting for any placement sent the Ctrl-C while a loaded machine still started the binary
    # (a KeyboardInterrupt during its imports, exit 1). From the moment the placement exists the
    # hint holds (ops/placements.hint_on_interrupt); the second after it only covers the client
    # reading the API server's answer to its create.
    mine = lambda: [p for p in placements(live.api, live.ns) if p["metadata"]["name"].startswith("interrupted-")]  # noqa: E731
    wait_for("the placement to exist", mine, 60)
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, (out, err)
    assert "stays in place" in err and "kubectl hami-place cancel" in err and "status" in err
    assert any(p["metadata"]["name"].startswith("interrupted-") for p in placements(live.api, live.ns))


@pytest.mark.hami
def test_progress_stream_needs_services_proxy_rbac_and_falls_back_without_it(live: Live, tmp_path) -> None:
    """The API server, not the agent, authorizes the progress stream: `get services/proxy` on the
    agent Service's proxy port (the chart's progress-reader Role, tests/chart asserts its shape)."""
    from testbed.agents.tokens import grant_node_read, sa_token

    rbac, apps = client.RbacAuthorizationV1Api(live.api), client.AppsV1Api(live.api)
    rbac.create_namespaced_role(
        live.ns,
        {
            "metadata": {"name": "placer"},
            "rules": [
                {"apiGroups": [hp.GROUP], "resources": [hp.PLURAL], "verbs": ["create", "get", "list", "watch"]},
                {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]},
            ],
        },
    )
    rbac.create_namespaced_role(
        "kube-system",
        {
            "metadata": {"name": f"progress-reader-{live.ns}"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services/proxy"],
                    "resourceNames": ["https:gpu-descheduler-webhook:proxy"],
                    "verbs": ["get"],
                }
            ],
        },
    )
    kubeconfigs = {}
    for user in ("plain", "reader"):
        token = sa_token(live.api, live.ns, user)
        subject = [{"kind": "ServiceAccount", "name": user, "namespace": live.ns}]
        rbac.create_namespaced_role_binding(
            live.ns,
            {"metadata": {"name": f"placer-{user}"}, "roleRef": _role_ref("placer"), "subjects": subject},
        )
        kubeconfigs[user] = live.testbed.write_token_kubeconfig(tmp_path / f"{user}.kubeconfig", user, token)
    # A placement's author must be allowed to read its node (here only this one, by resourceNames).
    ungrant = grant_node_read(
        live.api,
        f"placer-nodes-{live.ns}",
        [{"kind": "ServiceAccount", "name": u, "namespace": live.ns} for u in ("plain", "reader")],
        [live.targets[2].name],
    )
    rbac.create_namespaced_role_binding(
        "kube-system",
        {
            "metadata": {"name": f"progress-reader-{live.ns}"},
            "roleRef": _role_ref(f"progress-reader-{live.ns}"),
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": live.ns}],
        },
    )
    try:
        for user, gpu in (("plain", "gpu-0"), ("reader", "gpu-1")):
            apps.create_namespaced_deployment(live.ns, deployment(f"rbac-{user}", replicas=0))
            proc = live.popen(
                "pin",
                f"deploy/rbac-{user}",
                "-n",
                live.ns,
                "--node",
                live.targets[2].name,  # this test's own node: other tests fill the first two
                "--gpu",
                gpu,
                "-w",
                kubeconfig=kubeconfigs[user],
            )
            wait_for(
                "the placement",
                lambda u=user, proc=proc: (
                    proc.poll() is not None
                    or [p for p in placements(live.api, live.ns) if f"rbac-{u}" in p["metadata"]["name"]]
                ),
                60,
            )
            assert proc.poll() is None, (user, proc.communicate())
            apps.patch_namespaced_deployment_scale(f"rbac-{user}", live.ns, {"spec": {"replicas": 1}})
            out, err = proc.communicate(timeout=90)
            assert proc.returncode == 0, (user, out, err)
            if user == "plain":
                assert FALLBACK_NOTE in err and "forbidden" in err.lower(), err
            else:
                assert FALLBACK_NOTE not in err, err
            assert out.rstrip().splitlines()[-1].split()[1] == "Completed", out
    finally:
        ungrant()
        with contextlib.suppress(Exception):
            rbac.delete_namespaced_role_binding(f"progress-reader-{live.ns}", "kube-system")
        with contextlib.suppress(Exception):
            rbac.delete_namespaced_role(f"progress-reader-{live.ns}", "kube-system")


def _role_ref(name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}


def test_exec_plugin_and_client_certificate_reach_the_same_answer(live: Live, tmp_path) -> None:
    """The binary runs exec credential plugins (hami_place_core/kube) and sees what the test bed's
    client-certificate kubeconfig sees; a missing plugin is a one-line error."""
    import yaml

    from testbed.agents.tokens import admin_token

    client.AppsV1Api(live.api).create_namespaced_deployment(live.ns, deployment("paths", replicas=0))
    assert (
        live.run("pin", "deploy/paths", "-n", live.ns, "--node", live.targets[0].name, "--gpu", "gpu-0").returncode == 0
    )
    plugin = tmp_path / "cred-plugin.sh"
    token = admin_token(live.api)
    plugin.write_text(
        "#!/bin/sh\n"
        'test -n "$KUBERNETES_EXEC_INFO" || exit 9\n'
        f'echo \'{{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
        f'"status":{{"token":"{token}"}}}}\'\n'
    )
    plugin.chmod(0o755)
    kc = yaml.safe_load(live.testbed.write_token_kubeconfig(tmp_path / "exec.kubeconfig", "exec", "unused").read_text())
    kc["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "interactionMode": "Never"}
    }
    (tmp_path / "exec.kubeconfig").write_text(yaml.safe_dump(kc))
    # This module's namespace only: -A also lists namespaces other modules deleted, which the
    # namespace controller empties in the background, so two -A listings can differ.
    via_exec = live.run("status", "-n", live.ns, "-o", "json", kubeconfig=tmp_path / "exec.kubeconfig")
    assert via_exec.returncode == 0, via_exec.stderr
    via_cert = live.run("status", "-n", live.ns, "-o", "json")
    assert via_cert.returncode == 0, via_cert.stderr
    names = lambda out: sorted(i["metadata"]["name"] for i in json.loads(out)["items"])  # noqa: E731
    assert names(via_exec.stdout) == names(via_cert.stdout)
    assert any(name.startswith("paths-") for name in names(via_cert.stdout))
    kc["users"][0]["user"]["exec"]["command"] = str(tmp_path / "missing-plugin")
    (tmp_path / "exec.kubeconfig").write_text(yaml.safe_dump(kc))
    broken = live.run("status", "-A", kubeconfig=tmp_path / "exec.kubeconfig")
    assert broken.returncode == 1 and "exec plugin" in one_line_error(broken.stderr)


# ---- issue 24's rough edges of `move` -------------------------------------------------------------------
def test_move_keeps_the_pods_gpu_count_unless_asked(live: Live) -> None:
    apps, core = client.AppsV1Api(live.api), client.CoreV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("onegpu", replicas=1))
    victim = wait_for("a Running pod", lambda: running_pods(core, live.ns, "app=onegpu"), 60)[0].metadata.name
    target = live.targets[1].name
    args = ("move", victim, "-n", live.ns, "--node", target, "--gpu", "gpu-0", "--gpu", "gpu-1", "--evict")
    refused = live.run(*args)
    assert refused.returncode == 1, refused.stderr
    assert "has 1 GPU and the target names 2" in one_line_error(refused.stderr)
    asked = live.run(*args, "--change-gpu-count", "--dry-run=client")
    assert asked.returncode == 0, asked.stderr
    assert "the replacement gets 2 GPUs where the pod has 1 (--change-gpu-count)" in asked.stdout


def test_move_of_a_pod_without_a_controller_is_refused_without_evict_too(live: Live) -> None:
    core = client.CoreV1Api(live.api)
    spec = deployment("bare", gpu=0, scheduler="default-scheduler")["spec"]["template"]
    core.create_namespaced_pod(
        live.ns, {"metadata": {"name": "bare", "labels": spec["metadata"]["labels"]}, "spec": spec["spec"]}
    )
    result = live.run("move", "bare", "-n", live.ns, "--node", live.targets[0].name, "--gpu", "gpu-0")
    assert result.returncode == 1
    assert "has no controller, so no replacement will ever be created" in one_line_error(result.stderr)


def test_req_id_and_durations_read_as_kubectl_does(live: Live) -> None:
    bad = live.run("move", "x", "-n", live.ns, "--node", "n", "--gpu", "gpu-0", "--req-id", "abc")
    assert bad.returncode == 2 and "'abc' has 3 characters; a reqID has 5 to 63" in bad.stderr, bad.stderr
    assert "[default: 10m]" in live.run("move", "--help").stdout
    assert live.run("status", "-n", live.ns, "--request-timeout", "5s").returncode == 0
    slow = live.run("status", "-n", live.ns, "--request-timeout", "soon")
    assert slow.returncode == 2 and "'soon' is not a duration" in slow.stderr


@pytest.mark.hami
def test_move_with_strategy_surge_keeps_the_pod_until_its_successor_is_ready(live: Live, request: Any) -> None:
    apps, core = client.AppsV1Api(live.api), client.CoreV1Api(live.api)
    apps.create_namespaced_deployment(live.ns, deployment("surgecli", replicas=1))
    old = wait_for("a Running pod", lambda: running_pods(core, live.ns, "app=surgecli"), 60)[0].metadata.name
    target = NodeSpec(f"{live.ns[:50]}-surge", gpus=4)  # its own node: other tests fill the shared targets
    live.testbed.add_nodes([target])
    request.addfinalizer(lambda: core.delete_node(target.name))  # later tests count the nodes pods land on
    result = live.run("move", old, "-n", live.ns, "--node", target.name, "--gpu", "gpu-3", "--strategy", "surge")
    assert result.returncode == 0, result.stderr
    assert "starts one more replica of" in result.stdout and f"then removes pod {old} once it is Ready" in result.stdout
    assert "ScalingUp" in result.stdout and "Completed" in result.stdout, result.stdout
    assert apps.read_namespaced_deployment("surgecli", live.ns).spec.replicas == 1
    wait_for(
        "the old pod gone", lambda: old not in {p.metadata.name for p in running_pods(core, live.ns, "app=surgecli")}
    )
    # a StatefulSet's pod cannot surge: refused by the CLI before anything is created
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "sdb"},
        "spec": {"serviceName": "sdb", **deployment("sdb")["spec"]},
    }
    apps.create_namespaced_stateful_set(live.ns, sts)
    wait_for("sdb-0", lambda: running_pods(core, live.ns, "app=sdb"), 60)
    refused = live.run("move", "sdb-0", "-n", live.ns, "--node", target.name, "--gpu", "gpu-2", "--strategy", "surge")
    assert refused.returncode == 1
    assert (
        "pod sdb-0 belongs to StatefulSet sdb: surge moves only pods of a Deployment or ReplicaSet"
        in one_line_error(refused.stderr)
    )
