"""The test bed: a real control plane plus kwok-managed fake GPU nodes, as local processes.

etcd -> kube-apiserver (RBAC, admission webhooks on) -> kube-controller-manager,
kube-scheduler (profile default-scheduler), a second kube-scheduler for the hami-scheduler profile
(with the stand-in for HAMi's Filter as extender, testbed/hami/filter_standin.py, or with the real HAMi
scheduler when HAMI_SCHEDULER_BIN is set, testbed/hami/scheduler.py) and kwok, all on 127.0.0.1 with free
ports, all logging to <workdir>/logs/<component>.log.
"""

from __future__ import annotations

import json
import os
import shutil
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from testbed.controlplane.certs import CertificateAuthority, service_account_signer
from testbed.controlplane.processes import Process, StartupError, free_port, http_ok, stop_pid, wait_until
from testbed.data.gpu_nodes import NodeSpec, uniform_nodes
from testbed.hami import filter_standin
from testbed.hami.scheduler import (
    HamiScheduler,
    extender_config,
    post_bind_argv,
    scheduler_binary,
    webhook_configuration,
)
from toolchain import build

# Native gang scheduling (KEP-4671), alpha in 1.36: the PodGroup API (scheduling.k8s.io/v1alpha2),
# pods' spec.schedulingGroup, and the scheduler's gang plugin, in every control-plane process, so
# gangs run through the real kube-scheduler (issue 36). Pods without a group are unaffected.
FEATURE_GATES = "GenericWorkload=true,GangScheduling=true"
SERVICE_CIDR = "10.0.0.0/24"
WEBHOOK_CLIENT_CN = "kube-apiserver-webhook-client"
POD_CIDR = "10.244.0.0/16"
# Taints the node lifecycle controller sets and lifts on its own (k8s.io/api/core/v1 well_known_taints.go).
_LIFECYCLE_TAINTS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})

# Without HAMI_SCHEDULER_BIN, "hami-scheduler" is a kube-scheduler profile of its own whose only
# extender is the labelled stand-in for HAMi's Filter decision (testbed/hami/filter_standin.py): it
# honours affinity, taints and extended resources, refuses nodes whose GPUs cannot take the pod as
# HAMi's Fit judges, but writes no hami.io/vgpu-* annotations (tests that need those get the
# allocation stand-in from testbed/hami/allocation.py). Extenders are shared by all the profiles of a
# kube-scheduler, so the default-scheduler profile runs in a kube-scheduler without it.
SCHEDULER_CONFIG_HEADER = """\
# kube-scheduler configuration for the hami-place test bed: the default-scheduler profile.
# The hami-scheduler profile runs in a second kube-scheduler (kube-scheduler-hami-standin in the
# CI mode, kube-scheduler-hami with HAMI_SCHEDULER_BIN set).
"""
STANDIN_SCHEDULER_CONFIG_HEADER = """\
# kube-scheduler configuration for the hami-place test bed, CI mode (no HAMI_SCHEDULER_BIN).
# The "hami-scheduler" profile is a STAND-IN for HAMi's scheduler: plain kube-scheduler with a
# STAND-IN for HAMi's Filter as its extender (testbed/hami/filter_standin.py: whether the pod fits a
# node's GPUs, by the project's model of HAMi's Fit). It chooses no GPUs and writes no
# hami.io/vgpu-* annotations (testbed/hami/allocation_standin.py does, when a test starts it).
"""
STANDIN_SCHEDULER = "kube-scheduler-hami-standin"
HAMI_SCHEDULER_CONFIG_HEADER = """\
# kube-scheduler configuration for HAMi's profile, as HAMi's chart writes it
# (charts/hami/templates/scheduler/configmap.yaml): the real HAMi scheduler is the extender.
"""


@dataclass
class Identity:
    user: str
    groups: tuple[str, ...] = ()


@dataclass
class TestBed:
    __test__ = False  # not a pytest test class despite the name

    workdir: Path
    nodes: list[NodeSpec] = field(default_factory=lambda: uniform_nodes(3))
    binaries: dict[str, Path] | None = None
    start_timeout: float = 60.0

    components: dict[str, Process] = field(default_factory=dict, init=False)
    hami: HamiScheduler | None = field(default=None, init=False)
    timings: dict[str, float] = field(default_factory=dict, init=False)
    api_port: int = field(default=0, init=False)

    # ---- paths ---------------------------------------------------------------------------
    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "logs"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.pki / "serving-ca.crt"

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> TestBed:
        t0 = time.monotonic()
        if self.binaries is None:
            self.binaries = build.ensure_binaries()
        for d in (self.pki, self.log_dir, self.workdir / "etcd"):
            d.mkdir(parents=True, exist_ok=True)
        self._mint_pki()
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
            self._create_nodes(self.nodes)
            self._wait_cluster_usable()
        except BaseException:
            self.stop()
            raise
        self.timings["total"] = time.monotonic() - t0
        (self.workdir / "timings.json").write_text(json.dumps(self.timings, indent=2))
        return self

    def stop(self) -> None:
        # Reverse start order: clients first, so nothing logs errors about a vanished apiserver.
        for name in reversed(list(self.components)):
            self.components[name].stop()

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.components.items() if p.pid}

    def logs(self, lines: int = 40) -> str:
        parts = []
        for name, proc in self.components.items():
            state = "running" if proc.alive() else f"exited {proc.proc.returncode if proc.proc else '?'}"
            parts.append(f"===== {name} ({state}) {proc.log_path} =====\n{proc.log_tail(lines)}")
        return "\n".join(parts)

    # ---- PKI and kubeconfigs -------------------------------------------------------------
    def _mint_pki(self) -> None:
        self.serving_ca = CertificateAuthority("hami-place-testbed-serving-ca")
        self.client_ca = CertificateAuthority("hami-place-testbed-client-ca")
        self.ca_file.write_bytes(self.serving_ca.cert_pem)
        (self.pki / "client-ca.crt").write_bytes(self.client_ca.cert_pem)
        self.serving_ca.issue_server(["127.0.0.1", "localhost", "10.0.0.1", "kubernetes.default.svc"]).write(
            self.pki, "apiserver"
        )
        service_account_signer().write(self.pki, "sa")
        # A fourth root: the certificate kube-apiserver presents to webhooks that ask for one
        # (WebhookAdmission's kubeconfig), so agents can refuse reviews that do not come from it.
        self.webhook_client_ca = CertificateAuthority("hami-place-testbed-webhook-client-ca")
        self.webhook_client_ca_file.write_bytes(self.webhook_client_ca.cert_pem)
        crt, key = self.webhook_client_ca.issue_client(WEBHOOK_CLIENT_CN).write(self.pki, "webhook-client")
        kubeconfig = self.pki / "webhook-client.kubeconfig"
        kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    # "*": the credentials for every webhook host (kubernetes docs, "Authenticate
                    # API servers"); webhooks that do not ask for a certificate never see it.
                    "users": [{"name": "*", "user": {"client-certificate": str(crt), "client-key": str(key)}}],
                }
            )
        )
        webhook = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig),
        }
        self.admission_config.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "apiserver.config.k8s.io/v1",
                    "kind": "AdmissionConfiguration",
                    "plugins": [
                        {"name": "ValidatingAdmissionWebhook", "configuration": webhook},
                        {"name": "MutatingAdmissionWebhook", "configuration": webhook},
                    ],
                }
            )
        )

    @property
    def webhook_client_ca_file(self) -> Path:
        return self.pki / "webhook-client-ca.crt"

    @property
    def admission_config(self) -> Path:
        return self.pki / "admission-config.yaml"

    def webhook_client_pair(self) -> tuple[Path, Path]:
        """The client certificate and key kube-apiserver presents to webhooks."""
        return self.pki / "webhook-client.crt", self.pki / "webhook-client.key"

    def write_kubeconfig(self, path: Path, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for `user` (client certificate signed by the test bed's client CA)."""
        pair = self.client_ca.issue_client(user, groups)
        stem = path.stem
        crt, key = pair.write(self.pki, f"{stem}-client")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "testbed", "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)}}
            ],
            "users": [{"name": user, "user": {"client-certificate": str(crt), "client-key": str(key)}}],
            "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
            "current-context": "testbed",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def write_token_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        """A kubeconfig that authenticates with a bearer token (e.g. a ServiceAccount's)."""
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "testbed",
                            "cluster": {"server": self.server, "certificate-authority": str(self.ca_file)},
                        }
                    ],
                    "users": [{"name": user, "user": {"token": token}}],
                    "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
                    "current-context": "testbed",
                }
            )
        )
        path.chmod(0o600)
        return path

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki / "admin-client.crt"), str(self.pki / "admin-client.key"))
        return ctx

    # ---- components ----------------------------------------------------------------------
    def _spawn(self, name: str, argv: list[str]) -> Process:
        proc = Process(name, argv, self.log_dir)
        self.components[name] = proc
        proc.start()
        return proc

    def binary(self, name: str) -> Path:
        """The path of one of the test bed's binaries (etcd, kube-*, kwok, kubectl, helm, ...)."""
        if self.binaries is None:
            self.binaries = build.ensure_binaries()
        return self.binaries[name]

    def _bin(self, name: str) -> str:
        return str(self.binary(name))

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self._spawn(
            "etcd",
            [
                self._bin("etcd"),
                "--name=testbed",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=testbed=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync=true",  # throw-away data: durability only costs start-up time
                "--log-level=warn",
            ],
        )
        self.timings["etcd"] = wait_until(
            "/health", lambda: http_ok(self.etcd_url + "/health"), proc, self.start_timeout
        )

    def _start_apiserver(self) -> None:
        self.api_port = free_port()
        p = self.pki
        proc = self._spawn(
            "kube-apiserver",
            [
                self._bin("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                f"--secure-port={self.api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--tls-cert-file={p / 'apiserver.crt'}",
                f"--tls-private-key-file={p / 'apiserver.key'}",
                f"--client-ca-file={p / 'client-ca.crt'}",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={p / 'sa.crt'}",
                f"--service-account-signing-key-file={p / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook",
                f"--admission-control-config-file={self.admission_config}",
                "--allow-privileged=true",
                # The lease reconciler would publish 127.0.0.1 as the kubernetes Service endpoint,
                # which endpoint validation rejects (loopback) on every tick.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                f"--feature-gates={FEATURE_GATES}",
                # The PodGroup API of native gangs is alpha in 1.36: served only when asked for.
                "--runtime-config=scheduling.k8s.io/v1alpha2=true",
            ],
        )
        # The admin's client pair (pki/admin-client.*) also authenticates the readiness probe.
        self.write_kubeconfig(self.kubeconfig, "testbed-admin", ("system:masters",))
        ctx = self._ssl_context()
        self.timings["kube-apiserver"] = wait_until(
            "/readyz", lambda: http_ok(f"{self.server}/readyz", ctx), proc, self.start_timeout
        )

    def _start_controllers(self) -> None:
        kc = self.workdir / "kubeconfigs"
        kc.mkdir(exist_ok=True)
        kcm_port, sched_port = free_port(), free_port()
        kcm = self._spawn(
            "kube-controller-manager",
            [
                self._bin("kube-controller-manager"),
                f"--kubeconfig={self.write_kubeconfig(kc / 'kcm.kubeconfig', 'system:kube-controller-manager')}",
                f"--secure-port={kcm_port}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                "--controllers=*",
                # Each controller uses its own service account, as in a kubeadm cluster, so RBAC
                # is exercised exactly as in production.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--feature-gates={FEATURE_GATES}",
            ],
        )
        hami_binary = scheduler_binary()
        profiles = [{"schedulerName": "default-scheduler"}]
        standin = self._spawn_filter_standin() if hami_binary is None else None
        sched = self._spawn_scheduler("kube-scheduler", sched_port, profiles, [], SCHEDULER_CONFIG_HEADER)
        kwok_kc = self.write_kubeconfig(kc / "kwok.kubeconfig", "testbed-kwok", ("system:masters",))
        kwok = self._spawn(
            "kwok",
            [
                self._bin("kwok"),
                f"--kubeconfig={kwok_kc}",
                f"--config={self._bin(build.KWOK_STAGES)}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                "--manage-nodes-with-label-selector=",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.1.0.1",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed serving certs of kcm/scheduler
        self.timings["kube-controller-manager"] = wait_until(
            "/healthz", lambda: http_ok(f"https://127.0.0.1:{kcm_port}/healthz", insecure), kcm, self.start_timeout
        )
        self.timings["kube-scheduler"] = wait_until(
            "/healthz", lambda: http_ok(f"https://127.0.0.1:{sched_port}/healthz", insecure), sched, self.start_timeout
        )
        if hami_binary is not None:
            self._start_hami(hami_binary, insecure)
        if standin is not None:
            self._start_standin_scheduler(standin, insecure)
        if not kwok.alive():
            raise StartupError(f"kwok exited:\n{kwok.log_tail()}")

    def _spawn_scheduler(
        self, name: str, port: int, profiles: list[dict[str, Any]], extenders: list[dict[str, Any]], header: str
    ) -> Process:
        kubeconfig = self.write_kubeconfig(self.workdir / "kubeconfigs" / f"{name}.kubeconfig", "system:kube-scheduler")
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": str(kubeconfig)},
            "leaderElection": {"leaderElect": False},
            "profiles": profiles,
        }
        if extenders:
            config["extenders"] = extenders
        path = self.workdir / f"{name}-config.yaml"
        path.write_text(header + yaml.safe_dump(config))
        return self._spawn(
            name,
            [
                self._bin("kube-scheduler"),
                f"--config={path}",
                f"--secure-port={port}",
                "--bind-address=127.0.0.1",
                f"--feature-gates={FEATURE_GATES}",
            ],
        )

    def _spawn_filter_standin(self) -> tuple[Process, str]:
        """The stand-in for HAMi's Filter (CI mode), started early: Python takes a while to import."""
        port = free_port()
        kubeconfig = self.write_kubeconfig(
            self.workdir / "kubeconfigs" / "hami-filter-standin.kubeconfig",
            "testbed-hami-filter-standin",
            ("system:masters",),
        )
        proc = Process(filter_standin.COMPONENT, filter_standin.argv(kubeconfig, port), self.log_dir)
        self.components[proc.name] = proc
        proc.start_with_env({**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        return proc, f"http://127.0.0.1:{port}"

    def _start_standin_scheduler(self, standin: tuple[Process, str], insecure: ssl.SSLContext) -> None:
        """CI mode: the hami-scheduler profile in its own kube-scheduler, with the Filter stand-in."""
        t0 = time.monotonic()
        proc, url = standin
        wait_until("/healthz", lambda: http_ok(url + "/healthz"), proc, self.start_timeout)
        port = free_port()
        sched = self._spawn_scheduler(
            STANDIN_SCHEDULER,
            port,
            [{"schedulerName": "hami-scheduler"}],
            [filter_standin.extender_config(url)],
            STANDIN_SCHEDULER_CONFIG_HEADER,
        )
        healthz = f"https://127.0.0.1:{port}/healthz"
        wait_until("/healthz", lambda: http_ok(healthz, insecure), sched, self.start_timeout)
        self.timings[STANDIN_SCHEDULER] = time.monotonic() - t0

    def _start_hami(self, binary: Path, insecure: ssl.SSLContext) -> None:
        """HAMi's scheduler, its kube-scheduler (the hami-scheduler profile) and its webhook."""
        from kubernetes import client

        t0 = time.monotonic()
        self.hami = HamiScheduler(binary, self.workdir, self.log_dir)
        cert, key = self.serving_ca.issue_server(["127.0.0.1", "localhost"]).write(self.pki, "hami-scheduler")
        kubeconfig = self.write_kubeconfig(
            self.workdir / "kubeconfigs" / "hami-scheduler.kubeconfig", "testbed-hami-scheduler", ("system:masters",)
        )
        self.components["hami-scheduler"] = self.hami.start(kubeconfig, cert, key, self.start_timeout)
        port = free_port()
        sched = self._spawn_scheduler(
            "kube-scheduler-hami",
            port,
            [{"schedulerName": "hami-scheduler"}],
            [extender_config(self.hami.url)],
            HAMI_SCHEDULER_CONFIG_HEADER,
        )
        healthz = f"https://127.0.0.1:{port}/healthz"
        wait_until("/healthz", lambda: http_ok(healthz, insecure), sched, self.start_timeout)
        admission = client.AdmissionregistrationV1Api(self.api_client())
        webhook = webhook_configuration(self.hami.url, self.serving_ca.cert_pem)
        admission.create_mutating_webhook_configuration(webhook)  # type: ignore[arg-type]  # the client takes dicts
        # The device plugin's post-bind step, as a component: it must outlive `python -m testbed up`.
        post_bind = Process("hami-device-plugin-post-bind", post_bind_argv(self.kubeconfig), self.log_dir)
        self.components[post_bind.name] = post_bind
        post_bind.start_with_env({**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
        self.timings["hami-scheduler"] = time.monotonic() - t0

    # ---- API helpers ---------------------------------------------------------------------
    def api_client(self, kubeconfig: Path | None = None) -> Any:
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def _create_nodes(self, nodes: list[NodeSpec]) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        for spec in nodes:
            core.create_node(spec.manifest())  # type: ignore[arg-type]  # the client validates dicts itself

    def add_nodes(self, nodes: list[NodeSpec], timeout: float = 30) -> None:
        """Extra nodes for one test; `self.nodes` keeps only the session's base nodes."""
        self._create_nodes(nodes)
        self._wait_nodes_ready([n.name for n in nodes], timeout)

    def _wait_nodes_ready(self, names: list[str], timeout: float) -> None:
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            for node in core.list_node().items:
                conditions = (node.status.conditions if node.status else None) or []
                # Ready is not schedulable yet: the node lifecycle controller lifts the
                # not-ready NoSchedule taint (added at creation) a few seconds later, and pods
                # created in between all land on whichever node lost it first.
                lifecycle = [t for t in ((node.spec.taints if node.spec else None) or []) if t.key in _LIFECYCLE_TAINTS]
                ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
                if node.metadata and ready and not lifecycle:
                    pending.discard(node.metadata.name)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise StartupError(
                    f"nodes not Ready after {timeout}s: {sorted(pending)}\n{self.components['kwok'].log_tail()}"
                )
            time.sleep(0.2)

    def _wait_cluster_usable(self) -> None:
        """Nodes Ready (kwok works) and the default ServiceAccount exists (kcm works)."""
        from kubernetes import client

        t0 = time.monotonic()
        self._wait_nodes_ready([n.name for n in self.nodes], self.start_timeout)
        core = client.CoreV1Api(self.api_client())
        while True:
            try:
                core.read_namespaced_service_account("default", "default")
                break
            except client.ApiException as e:
                if e.status != 404:
                    raise
            if time.monotonic() - t0 > self.start_timeout:
                raise StartupError(
                    "default ServiceAccount never appeared:\n" + self.components["kube-controller-manager"].log_tail()
                )
            time.sleep(0.1)
        self.timings["nodes+serviceaccount"] = time.monotonic() - t0


# ---- state file for the human command (python -m testbed up|down|env) ---------------------
def state_path(workdir: Path) -> Path:
    return workdir / "testbed.json"


def save_state(bed: TestBed) -> None:
    state_path(bed.workdir).write_text(
        json.dumps(
            {
                "kubeconfig": str(bed.kubeconfig),
                "server": bed.server,
                "pids": bed.pids(),
                "logs": str(bed.log_dir),
                "nodes": [n.name for n in bed.nodes],
            },
            indent=2,
        )
    )


def load_state(workdir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(state_path(workdir).read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def down(workdir: Path) -> bool:
    state = load_state(workdir)
    if not state:
        return False
    for pid in reversed(list(state["pids"].values())):
        stop_pid(int(pid))
    shutil.rmtree(workdir, ignore_errors=True)
    return True
