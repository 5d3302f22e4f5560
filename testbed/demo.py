"""``make demo``: a live tour of hami-place on a local test bed, left running for you to explore.

    python -m testbed.demo                 # start (or report the one already up)
    python -m testbed.demo --down          # stop the agent, the allocation stand-in and the test bed

It starts the test bed detached with a dozen fake HAMi GPU nodes (4 x A100 80GB each), installs
the HamiPodPlacement CRD, runs the agent (``python -m agent``, detached, behind its webhooks and a
Service in kube-system so the plugin streams progress through the API server's service proxy) and
whoever allocates, as ``testbed/hami/allocation.py`` ``start_allocator`` decides everywhere on the test
bed: with ``HAMI_SCHEDULER_BIN`` the real HAMi scheduler (its Filter and Bind, docs/testing.md);
without it the labelled allocation stand-in (``python -m testbed.demo --standin demo``), which
writes HAMi's allocation for pinned pods. Every pod the demo places is pinned, so the tour is the
same in both modes. Then it
pins 14 small inference Deployments, one slice per GPU, scattered over every node, and shows the
plugin at work: ``inspect``, ``pin -w`` of a 2-GPU trainer, ``move --evict`` of a lone slice onto
a GPU another slice already uses (freeing a whole GPU and a whole node), ``inspect`` and ``status``.
Every step runs the real ``kubectl-hami_place`` with its output shown as it happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from testbed.controlplane.cluster import TestBed, load_state, save_state
from testbed.controlplane.cluster import down as testbed_down
from testbed.controlplane.crd import install_crd
from testbed.controlplane.processes import Process, StartupError, stop_pid
from testbed.data.gpu_nodes import A100_80G, uniform_nodes
from testbed.hami.allocation import real_hami, start_allocator
from toolchain import build

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "demo"
AGENT_LABEL = "demo"  # namespaces labelled hami-place-agent=demo are served by the demo's agent
AGENT_NAMESPACE, AGENT_SERVICE = "kube-system", "gpu-descheduler-webhook"
WEBHOOK_CONFIG = "hami-place-demo"
NODES, GPUS_PER_NODE = 12, 4
STATE_FILE = "demo.json"
FALLBACK_NOTE = "following the placement object instead"


@dataclass(frozen=True)
class Slice:
    """One small single-GPU inference Deployment and where it is pinned."""

    name: str
    node: str
    gpu: int
    percent: int  # nvidia.com/gpumem-percentage and nvidia.com/gpucores


def _node(i: int) -> str:
    return f"gpu-node-{i}"


# Every node holds at least one slice, so no node can take a 4-GPU job although most GPUs are free.
LAYOUT: tuple[Slice, ...] = (
    Slice("chat-a", _node(1), 0, 25),
    Slice("embed-a", _node(1), 2, 40),
    Slice("asr-a", _node(2), 1, 30),
    Slice("ocr-a", _node(2), 3, 50),
    Slice("rerank-a", _node(3), 2, 35),
    Slice("vision-a", _node(4), 0, 45),
    Slice("tts-a", _node(5), 3, 25),
    Slice("chat-b", _node(6), 1, 50),
    Slice("embed-b", _node(7), 2, 30),
    Slice("asr-b", _node(8), 0, 40),
    Slice("ocr-b", _node(9), 1, 25),
    Slice("rerank-b", _node(10), 3, 35),
    Slice("vision-b", _node(11), 2, 50),
    Slice("tts-b", _node(12), 3, 30),
)
TRAINER, TRAINER_NODE, TRAINER_GPUS = "trainer", _node(12), ("gpu-0", "gpu-1")
# ocr-b is alone on gpu-node-9; chat-a (25%) leaves room for it on gpu-node-1 gpu-0.
MOVE_FROM, MOVE_NODE, MOVE_GPU = "ocr-b", _node(1), "gpu-0"

T = TypeVar("T")


def default_dir() -> Path:
    return build.cache_root() / "demo-run"


def cli_path() -> Path:
    return Path(sys.executable).parent / "kubectl-hami_place"


# ---- small helpers ------------------------------------------------------------------------------
def say(text: str = "") -> None:
    print(text, flush=True)


def banner(step: str, text: str) -> None:
    say()
    say("=" * 100)
    say(f"  {step}  {text}")
    say("=" * 100)


def wait_for(what: str, fn: Callable[[], T | None], timeout: float, interval: float = 0.25) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):  # an API hiccup is "not yet"
            last = fn()
            if last:
                return last
        time.sleep(interval)
    raise StartupError(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _ours(pid: int, marker: str) -> bool:
    """Only signal a recorded pid while it still runs what we started (pids are reused)."""
    return pid_alive(pid) and marker in _cmdline(pid)


def deployment(
    name: str, gpus: int, percent: int, replicas: int = 0, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    labels = labels or {"app": name}
    limits = {
        "nvidia.com/gpu": str(gpus),
        "nvidia.com/gpumem-percentage": str(percent),
        "nvidia.com/gpucores": str(percent),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": {"hami-place-demo": "true"}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "schedulerName": "hami-scheduler",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
                    ],
                },
            },
        },
    }


# ---- state --------------------------------------------------------------------------------------
def load_demo(state_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((state_dir / STATE_FILE).read_text()))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def save_demo(state_dir: Path, state: dict[str, Any]) -> None:
    (state_dir / STATE_FILE).write_text(json.dumps(state, indent=2))


def demo_running(state_dir: Path) -> bool:
    bed, demo = load_state(state_dir), load_demo(state_dir)
    if not bed or not demo or not demo.get("ready"):
        return False
    pids = [int(p) for p in bed["pids"].values()] + [int(demo["agent_pid"])]
    if demo.get("standin_pid"):  # none in HAMi mode
        pids.append(int(demo["standin_pid"]))
    return all(pid_alive(p) for p in pids)


def ours_dir(state_dir: Path) -> bool:
    """Missing, empty, or a demo's: the only directories the demo deletes."""
    if not state_dir.exists():
        return True
    entries = {p.name for p in state_dir.iterdir()}
    return not entries or bool(entries & {STATE_FILE, "testbed.json", "logs", "pki"})


def stop_demo(state_dir: Path) -> bool:
    """Stop what a demo in `state_dir` started and delete its state; True when there was a demo."""
    demo = load_demo(state_dir)
    found = demo is not None
    for key, marker in (("standin_pid", "testbed.demo"), ("agent_pid", "-m agent")):
        pid = int((demo or {}).get(key) or 0)
        if pid and _ours(pid, marker):
            stop_pid(pid)
    found = testbed_down(state_dir) or found  # stops the control plane (and deletes the directory)
    if state_dir.exists() and found and ours_dir(state_dir):
        shutil.rmtree(state_dir, ignore_errors=True)
    return found


# ---- the allocation stand-in as a detached process -----------------------------------------------
def run_standin(namespace: str, kubeconfig: Path) -> int:
    """``--standin NS``: HAMi's allocation write for pinned pods in NS, until SIGTERM."""
    import signal
    import threading

    from kubernetes import config

    from testbed.hami.allocation_standin import AllocationStandIn

    api = config.new_client_from_config(config_file=str(kubeconfig))
    standin = start_allocator(api, {namespace}, interval=0.25)
    if not isinstance(standin, AllocationStandIn):
        print("allocation stand-in: not needed, the real HAMi scheduler allocates", flush=True)
        return 0
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print(f"allocation stand-in: writing HAMi's allocation for pinned pods in {namespace}", flush=True)
    last = 0
    while not stopped.wait(1.0):
        for pod in standin.allocated[last:]:
            print(f"allocated {pod}", flush=True)
        last = len(standin.allocated)
    standin.stop()
    return 0


# ---- the demo -----------------------------------------------------------------------------------
class Demo:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.bed: TestBed | None = None
        self.api: Any = None
        self.agent: Any = None
        self.token = ""
        self.state: dict[str, Any] = {}
        self.t0 = time.monotonic()

    @property
    def kubeconfig(self) -> Path:
        assert self.bed is not None
        return self.bed.kubeconfig

    def cli_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HAMI_PLACE_")}
        env["KUBECONFIG"] = str(self.kubeconfig)
        return env

    def cli(self, *args: str, show: bool = True, capture: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the plugin; its output goes straight to ours (live) unless captured."""
        if show:
            say(f"\n$ kubectl hami-place {' '.join(args)}")
        proc = subprocess.run(
            [str(cli_path()), *args],
            env=self.cli_env(),
            text=True,
            capture_output=capture,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0:
            detail = f":\n{proc.stdout}{proc.stderr}" if capture else ""
            raise StartupError(f"kubectl hami-place {' '.join(args)} exited {proc.returncode}{detail}")
        return proc

    def heatmap(self) -> None:
        self.cli("inspect", "--heatmap")
        order = sorted(_node(i) for i in range(1, NODES + 1))
        say(f"(blocks left to right, wrapping: {', '.join(order)})")

    def snapshot(self, name: str) -> dict[str, Any]:
        """`inspect -o json`, kept in the state dir (the figures the demo compares)."""
        out = self.cli("inspect", "-o", "json", show=False, capture=True).stdout
        (self.state_dir / f"{name}.json").write_text(out)
        return dict(json.loads(out)["summary"])

    # ---- 1. the test bed, the CRD, the agent and the stand-in ----------------------------------------
    def start_platform(self) -> None:

        banner("1/6", f"test bed: a real control plane + {NODES} fake HAMi nodes x {GPUS_PER_NODE} A100 80GB")
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self.state_dir.mkdir(parents=True)
        self.bed = TestBed(workdir=self.state_dir, nodes=uniform_nodes(NODES, GPUS_PER_NODE, A100_80G))
        self.bed.start()
        save_state(self.bed)
        say(f"control plane and {NODES} nodes Ready in {self.bed.timings['total']:.1f}s ({self.bed.server})")
        self.api = self.bed.api_client()
        core = _k8s("CoreV1Api", self.api)
        core.create_namespace(
            {"metadata": {"name": NAMESPACE, "labels": {"hami-place-agent": AGENT_LABEL, "hami-place-demo": "true"}}}
        )
        install_crd(self.api)
        say("CRD hamipodplacements.scheduling.hami.placement.com established")
        self._start_agent()
        self._start_standin()
        save_demo(self.state_dir, self.state)

    def _start_agent(self) -> None:

        from testbed.agents.agent_process import AgentProcess, expose_agent_service
        from testbed.agents.webhooks import register_webhooks, webhook_configs
        from testbed.controlplane.certs import CertificateAuthority

        assert self.bed is not None
        ca = CertificateAuthority("hami-place-demo-agent-ca")
        # host 0.0.0.0: the API server's service proxy reaches it at this machine's address.
        agent = AgentProcess(
            self.bed.log_dir,
            self.kubeconfig,
            ca,
            name="agent",
            label=AGENT_LABEL,
            host="0.0.0.0",  # noqa: S104
        )
        # Process starts it in its own session, logging to logs/agent.log: it outlives this command.
        agent.start(timeout=60)
        assert agent.proc is not None and agent.proc.pid
        self.agent = agent
        self.state.update(
            agent_pid=agent.proc.pid,
            agent_url=agent.url,
            agent_proxy_port=agent.proxy_port,
            agent_log=str(agent.proc.log_path),
        )
        save_demo(self.state_dir, self.state)
        say(f"agent running (pid {agent.proc.pid}, {agent.url}, log {agent.proc.log_path})")
        register_webhooks(
            self.api,
            *webhook_configs(
                self.bed.binary("helm"), WEBHOOK_CONFIG, agent.url, ca.cert_pem, {"hami-place-agent": AGENT_LABEL}
            ),
        )
        self._wait_webhooks()
        say(f"webhooks registered for namespaces labelled hami-place-agent={AGENT_LABEL} (namespace {NAMESPACE})")
        expose_agent_service(self.api, agent, AGENT_NAMESPACE, AGENT_SERVICE)
        say(f"Service {AGENT_NAMESPACE}/{AGENT_SERVICE} points at the agent: progress streams via the API server")
        self.token = self._reader_token()

    def _wait_webhooks(self) -> None:
        """Until the agent's validating webhook answers for the demo namespace (a dry-run probe)."""
        from kubernetes.client import ApiException

        from hami_place_core import placement as hp

        custom = _k8s("CustomObjectsApi", self.api)
        body = {
            "apiVersion": hp.API_VERSION,
            "kind": hp.KIND,
            "metadata": {"name": "webhook-probe"},
            "spec": {
                "reqID": "webhook-probe",
                "podSelector": {"matchLabels": {"app": "webhook-probe"}},
                "nodeName": "no-such-node",
                "gpuDevices": ["gpu-0"],
            },
        }

        def active() -> bool:
            try:
                custom.create_namespaced_custom_object(hp.GROUP, hp.VERSION, NAMESPACE, hp.PLURAL, body, dry_run="All")
            except ApiException as e:
                return "admission webhook" in str(e.body)
            return False

        wait_for("the agent's webhooks to take effect", active, 30, 0.2)

    def _reader_token(self) -> str:
        """A token that may list the demo's placements: the demo asks the agent what it has cached."""

        from hami_place_core import placement as hp

        core, rbac = _k8s("CoreV1Api", self.api), _k8s("RbacAuthorizationV1Api", self.api)
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "demo-reader"}})
        rbac.create_namespaced_role(
            NAMESPACE,
            {
                "metadata": {"name": "demo-reader"},
                "rules": [{"apiGroups": [hp.GROUP], "resources": [hp.PLURAL], "verbs": ["get", "list", "watch"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            NAMESPACE,
            {
                "metadata": {"name": "demo-reader"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "demo-reader"},
                "subjects": [{"kind": "ServiceAccount", "name": "demo-reader", "namespace": NAMESPACE}],
            },
        )
        req = core.create_namespaced_service_account_token(
            "demo-reader", NAMESPACE, {"spec": {"expirationSeconds": 3600}}
        )
        return str(req.status.token)

    def agent_has(self, names: set[str]) -> bool:
        """Every placement in `names` is in the agent's cache, so a pod created now is matched."""
        code, body = self.agent.get(f"/api/v1/placements?namespace={NAMESPACE}", self.token)
        return code == 200 and names <= {i["name"] for i in json.loads(body).get("items") or []}

    def _start_standin(self) -> None:
        assert self.bed is not None
        if real_hami():
            # HAMi's Filter allocates the pinned pods itself; nothing to start (start_allocator).
            self.state.update(standin_pid=0, allocator="hami")
            say(f"allocation: the real HAMi scheduler ({self.bed.hami.version if self.bed.hami else '?'}) as extender")
            return
        proc = Process(
            "allocation-standin",
            [sys.executable, "-m", "testbed.demo", "--standin", NAMESPACE, "--kubeconfig", str(self.kubeconfig)],
            self.bed.log_dir,
        )
        proc.start_with_env({**os.environ, "PYTHONUNBUFFERED": "1"}, cwd=REPO)
        assert proc.pid
        time.sleep(0.5)
        if not proc.alive():
            raise StartupError(f"the allocation stand-in exited:\n{proc.log_tail()}")
        self.state.update(standin_pid=proc.pid, standin_log=str(proc.log_path), allocator="standin")
        say(f"allocation stand-in running (pid {proc.pid}, log {proc.log_path}): it plays HAMi's Filter write")

    # ---- 2. the fragmented workload ----------------------------------------------------------------
    def fragment(self) -> None:

        banner("2/6", f"workload: {len(LAYOUT)} small inference Deployments, each pinned to its own GPU")
        apps = _k8s("AppsV1Api", self.api)
        for s in LAYOUT:
            apps.create_namespaced_deployment(NAMESPACE, deployment(s.name, 1, s.percent))
        say(
            f"created {len(LAYOUT)} Deployments at replicas 0 (1 GPU, {min(s.percent for s in LAYOUT)}-"
            f"{max(s.percent for s in LAYOUT)}% of its memory and cores each); pinning each with the plugin:"
        )
        names: set[str] = set()
        for batch in _batches(list(LAYOUT), 4):  # a few plugin processes at a time
            procs = [
                (
                    s,
                    subprocess.Popen(
                        [
                            str(cli_path()),
                            "pin",
                            f"deploy/{s.name}",
                            "-n",
                            NAMESPACE,
                            "--node",
                            s.node,
                            "--gpu",
                            f"gpu-{s.gpu}",
                        ],
                        env=self.cli_env(),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    ),
                )
                for s in batch
            ]
            for s, p in procs:
                out, err = p.communicate(timeout=120)
                if p.returncode != 0:
                    raise StartupError(f"pin deploy/{s.name} failed ({p.returncode}): {out}{err}")
                first = out.splitlines()[0]  # "placement demo/<name> created (reqID ...)"
                names.add(first.split()[1].split("/")[1])
                say(
                    f"  $ kubectl hami-place pin deploy/{s.name:<9} -n {NAMESPACE} --node {s.node:<11} "
                    f"--gpu gpu-{s.gpu}   -> {first}"
                )
        wait_for("the agent to cache every placement", lambda: self.agent_has(names), 30)
        for s in LAYOUT:
            apps.patch_namespaced_deployment_scale(s.name, NAMESPACE, {"spec": {"replicas": 1}})
        say(f"scaled all {len(LAYOUT)} to 1 replica; waiting until every pod runs on its pinned GPU ...")
        wait_for("every pinned pod Running and its placement Completed", lambda: self._all_completed(names), 180, 0.5)
        say(f"all {len(LAYOUT)} pods Running, all {len(names)} placements Completed")

    def _all_completed(self, names: set[str]) -> bool:

        from hami_place_core import placement as hp

        items = _k8s("CustomObjectsApi", self.api).list_namespaced_custom_object(
            hp.GROUP, hp.VERSION, NAMESPACE, hp.PLURAL
        )["items"]
        phases = {p["metadata"]["name"]: (p.get("status") or {}).get("phase") for p in items}
        failed = [n for n in names if phases.get(n) == "Failed"]
        if failed:
            raise StartupError(f"placements failed: {failed}")
        if any(phases.get(n) != "Completed" for n in names):
            return False
        pods = _k8s("CoreV1Api", self.api).list_namespaced_pod(NAMESPACE).items
        running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
        return len(running) >= len(names)

    # ---- 3..6. the tour ----------------------------------------------------------------------------
    def tour(self) -> None:

        from hami_place_core import placement as hp

        apps, core = _k8s("AppsV1Api", self.api), _k8s("CoreV1Api", self.api)
        first = self.snapshot("start")
        banner("3/6", "inspect: every GPU as HAMi accounts it, and how fragmented the cluster is")
        self.heatmap()
        self.cli("inspect", _node(1), _node(9), TRAINER_NODE)
        say(
            f"\n-> {first['cluster']['wholeFree']} whole GPUs are free, but every node holds a slice: "
            f"the biggest whole-GPU job one node can take is {_biggest_job(first)} GPUs."
        )

        banner("4/6", f"pin: a new 2-GPU Deployment '{TRAINER}' onto {TRAINER_NODE} gpu-0 + gpu-1, followed live")
        apps.create_namespaced_deployment(NAMESPACE, deployment(TRAINER, 2, 100))
        say(
            f"created deploy/{TRAINER} (2 whole GPUs) at replicas 0; while pin -w follows its placement, the demo "
            f"scales it up (kubectl scale deploy/{TRAINER} -n {NAMESPACE} --replicas=1)"
        )
        args = ["pin", f"deploy/{TRAINER}", "-n", NAMESPACE, "--node", TRAINER_NODE]
        for g in TRAINER_GPUS:
            args += ["--gpu", g]
        args += ["-w", "--timeout", "3m"]
        say(f"\n$ kubectl hami-place {' '.join(args)}")
        pin = subprocess.Popen([str(cli_path()), *args], env=self.cli_env(), text=True)
        try:

            def trainer_cached() -> bool:
                items = _k8s("CustomObjectsApi", self.api).list_namespaced_custom_object(
                    hp.GROUP, hp.VERSION, NAMESPACE, hp.PLURAL
                )["items"]
                mine = {p["metadata"]["name"] for p in items if p["metadata"]["name"].startswith(f"{TRAINER}-")}
                return bool(mine) and self.agent_has(mine)

            wait_for("the trainer's placement", trainer_cached, 60)
            time.sleep(1.0)  # let pin -w open its stream first: what follows is live
            apps.patch_namespaced_deployment_scale(TRAINER, NAMESPACE, {"spec": {"replicas": 1}})
            rc = pin.wait(timeout=240)
        finally:
            if pin.poll() is None:
                pin.kill()
                pin.wait()
        if rc != 0:
            raise StartupError(f"pin -w exited {rc}")

        before = self.snapshot("before-move")
        victim = _running_pod(core, MOVE_FROM)
        source = victim.spec.node_name
        banner("5/6", f"move --evict: {MOVE_FROM}'s pod leaves {source} for {MOVE_NODE} {MOVE_GPU} (shared)")
        say(
            f"{MOVE_FROM} is the only pod on {source}; {MOVE_NODE} {MOVE_GPU} already runs "
            f"{_on_gpu(MOVE_NODE, MOVE_GPU)} and has room for it."
        )
        self.cli(
            "move",
            victim.metadata.name,
            "-n",
            NAMESPACE,
            "--node",
            MOVE_NODE,
            "--gpu",
            MOVE_GPU,
            "--evict",
            "--timeout",
            "3m",
        )
        after = self.snapshot("after-move")
        self.state.update(moved_pod=victim.metadata.name, move_source=source)

        banner("6/6", "inspect again, and the placements")
        self.heatmap()
        self.cli("inspect", MOVE_NODE, source)
        wb, wa = before["cluster"]["wholeFree"], after["cluster"]["wholeFree"]
        say(
            f"\n-> whole GPUs free: {wb} -> {wa} ({wa - wb:+d}); {source} is empty: the biggest whole-GPU job "
            f"one node can take went from {_biggest_job(before)} to {_biggest_job(after)} GPUs."
        )
        self.cli("status", "-n", NAMESPACE)


def _k8s(kind: str, api: Any) -> Any:
    """A kubernetes client API object, untyped: the demo passes plain dicts, which the client accepts."""
    from kubernetes import client

    return getattr(client, kind)(api)


def _batches(items: list[Slice], n: int) -> Iterator[list[Slice]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _biggest_job(summary: dict[str, Any]) -> int:
    return max((int((n.get("metrics") or {}).get("wholeFree", 0)) for n in summary["nodes"]), default=0)


def _on_gpu(node: str, gpu: str) -> str:
    index = int(gpu.split("-")[1])
    return ", ".join(s.name for s in LAYOUT if s.node == node and s.gpu == index) or "nothing"


def _running_pod(core: Any, app: str) -> Any:
    def find() -> Any:
        pods = core.list_namespaced_pod(NAMESPACE, label_selector=f"app={app}").items
        return next((p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp), None)

    return wait_for(f"a Running pod of {app}", find, 60)


def print_ready(state_dir: Path, seconds: float | None) -> None:
    bed = load_state(state_dir) or {}
    kubeconfig = bed.get("kubeconfig", state_dir / "admin.kubeconfig")
    say()
    say("=" * 100)
    if seconds is not None:
        who = "HAMi scheduler" if real_hami() else "allocation stand-in"
        say(f"  demo ready in {seconds:.0f}s; it keeps running (agent, {who}, test bed)")
    else:
        say(f"  a demo is already running (state in {state_dir})")
    say("=" * 100)
    say(f"  export KUBECONFIG={kubeconfig}")
    say(f"  export PATH={cli_path().parent}:$PATH      # so kubectl finds the plugin as `kubectl hami-place`")
    kubectl = build.locate("kubectl", build.cache_bin_dir())
    if shutil.which("kubectl") is None and kubectl is not None:
        say(f"  alias kubectl={kubectl}      # the test bed's own kubectl")
    say()
    say("  try:")
    say("    kubectl hami-place inspect --heatmap")
    say(f"    kubectl hami-place inspect {_node(1)} {_node(12)} -o wide")
    say(f"    kubectl hami-place status -n {NAMESPACE} -o wide")
    say(f"    kubectl hami-place pin deploy/chat-b -n {NAMESPACE} --node {_node(9)} --gpu gpu-2/50 --dry-run=client")
    say(f"    # empty {_node(5)}: its only pod joins tts-b on {_node(12)} gpu-3")
    say(
        f"    kubectl hami-place move $(kubectl get pod -n {NAMESPACE} -l app=tts-a -o name | cut -d/ -f2) "
        f"-n {NAMESPACE} --node {_node(12)} --gpu gpu-3 --evict"
    )
    say(f"  logs: {state_dir / 'logs'} (agent.log, allocation-standin.log, one per component)")
    say("  stop: make demo-down")
    say()


def up(state_dir: Path) -> int:
    t0 = time.monotonic()
    if demo_running(state_dir):
        print_ready(state_dir, None)
        return 0
    if not ours_dir(state_dir):
        print(
            f"error: {state_dir} exists and is not a demo's state directory; choose another --state-dir",
            file=sys.stderr,
        )
        return 1
    if load_state(state_dir) or load_demo(state_dir):
        say(f"cleaning up a previous demo that is no longer whole ({state_dir})")
        stop_demo(state_dir)
    demo = Demo(state_dir)
    try:
        demo.start_platform()
        demo.fragment()
        demo.tour()
    except BaseException as e:
        # Never leave half a demo behind: show why, then stop everything this run started.
        print(f"\nerror: {e}" if not isinstance(e, KeyboardInterrupt) else "\ninterrupted", file=sys.stderr)
        for name in ("agent.log", "allocation-standin.log"):
            log = state_dir / "logs" / name
            if log.exists():
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
                print(f"----- {name} (last 30 lines) -----\n{tail}", file=sys.stderr)
        if demo.bed is not None and not isinstance(e, KeyboardInterrupt):
            print(demo.bed.logs(15), file=sys.stderr)
        stop_demo(state_dir)
        if isinstance(e, KeyboardInterrupt):
            return 130
        if isinstance(e, (build.BuildError, StartupError, OSError)):
            return 1
        raise
    demo.state["ready"] = True
    demo.state["seconds"] = round(time.monotonic() - t0, 1)
    save_demo(state_dir, demo.state)
    print_ready(state_dir, time.monotonic() - t0)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m testbed.demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--state-dir", type=Path, default=default_dir(), help="state and log directory (default: %(default)s)"
    )
    parser.add_argument("--down", action="store_true", help="stop the demo: agent, stand-in and test bed")
    parser.add_argument("--standin", metavar="NS", help=argparse.SUPPRESS)  # the detached stand-in process
    parser.add_argument("--kubeconfig", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.standin:
        return run_standin(args.standin, args.kubeconfig)
    if args.down:
        if stop_demo(args.state_dir):
            print(f"demo stopped (state in {args.state_dir} removed)")
        else:
            print(f"no demo running (no state in {args.state_dir})")
        return 0
    return up(args.state_dir)


if __name__ == "__main__":
    sys.exit(main())
