"""Compare hami_place_core's Fit with HAMi's Filter case by case, and count the disagreements by kind.

The model answers from the same objects HAMi sees: the case's nodes and preloaded pods
(``build_state``), the pod *as submitted* read with ``webhook=True`` (so the model's copy of HAMi's
webhook is judged too), and the policies the pod's annotations choose over the chart's defaults
(node binpack, GPU spread). Kinds of disagreement:

- ``webhook``: the request the model derives differs from the one HAMi's webhook left on the pod;
- ``node-fit``: the model and HAMi disagree whether the pod fits one of the nodes;
- ``node``: both place the pod, on different nodes whose scores differ (equal scores are HAMi's
  nondeterminism: it scores nodes in goroutines, so the order among ties is arbitrary; counted
  as a node tie, not a disagreement);
- ``gpus``: on a node where both fit the pod, the GPUs picked for a container differ (order
  included: it is HAMi's walk order);
- ``shares``: the memory or cores charged on a GPU differ;
- ``encoding``: on the node both choose, with the same GPUs, the model's
  ``hami.io/vgpu-devices-allocated`` value differs from what HAMi wrote (its segments: one per
  container that got GPUs);
- ``probe``: HAMi answered with an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hami_place_core import annotations as ann
from hami_place_core.requests import PodRequest, pod_request
from hami_place_core.state import ClusterState, build_state
from testbed.hami.fit_cases import FitCase, generate, node_manifest, pod_manifest, preloaded_manifest
from testbed.hami.fit_probe import HamiAnswer
from testbed.hami.simulate import Policy, Simulator, fit_on_node

KINDS = ("webhook", "node-fit", "node", "gpus", "shares", "encoding", "probe")
Shares = tuple[tuple[tuple[str, int, int], ...], ...]  # per GPU container: (uuid, MiB, cores)


@dataclass
class Verdict:
    case: str
    disagreements: list[tuple[str, str]] = field(default_factory=list)  # (kind, detail)
    tie: bool = False
    seconds: float = 0.0


def _policy(annotations: dict[str, str], key: str, default: Policy) -> Policy:
    # HAMi: NodeScoreList.Less is spread only for "spread"; DeviceUsageList.Less binpack only for
    # "binpack" (pkg/scheduler/policy/*.go); anything else is the other one.
    value = annotations.get(key)
    if value is None:
        return default
    if key == ann.POD_NODE_SCHEDULER_POLICY:
        return "spread" if value == "spread" else "binpack"
    return "binpack" if value == "binpack" else "spread"


def model_state(case: FitCase) -> ClusterState:
    nodes = []
    for n in case.nodes:
        m = node_manifest(case, n)
        m["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # HAMi does not look
        nodes.append(m)
    pods = [preloaded_manifest(case, p) for p in case.preloaded]
    return build_state(nodes, pods)


def _gpu_shares(containers: tuple[tuple[ann.ContainerDevice, ...], ...]) -> Shares:
    return tuple(tuple((d.uuid, d.usedmem, d.usedcores) for d in devs) for devs in containers if devs)


def _hami_shares(encoded: str | None) -> Shares:
    decoded = ann.decode_pod_devices(encoded)
    return tuple(tuple((d.uuid, d.usedmem, d.usedcores) for d in devs) for devs in decoded.containers if devs)


def _compare_shares(verdict: Verdict, node: str, model: Shares, hami: Shares) -> None:
    if [[u for u, _, _ in c] for c in model] != [[u for u, _, _ in c] for c in hami]:
        verdict.disagreements.append(("gpus", f"{node}: model {model} HAMi {hami}"))
    elif model != hami:
        verdict.disagreements.append(("shares", f"{node}: model {model} HAMi {hami}"))


def judge(case: FitCase, hami: HamiAnswer) -> Verdict:
    verdict = Verdict(case.name, seconds=hami.seconds)
    if hami.error:
        verdict.disagreements.append(("probe", hami.error))
        return verdict
    request = pod_request(pod_manifest(case), webhook=True)
    admitted = pod_request(hami.admitted)
    if request != admitted:
        verdict.disagreements.append(("webhook", f"model {request} HAMi {admitted}"))
    annotations = dict(case.annotations)
    node_policy = _policy(annotations, ann.POD_NODE_SCHEDULER_POLICY, "binpack")
    gpu_policy = _policy(annotations, ann.POD_GPU_SCHEDULER_POLICY, "spread")
    state = model_state(case)
    _judge_nodes(verdict, case, state, request, gpu_policy, hami)
    _judge_choice(verdict, case, state, request, (node_policy, gpu_policy), hami)
    return verdict


def _judge_nodes(
    verdict: Verdict, case: FitCase, state: ClusterState, request: PodRequest, gpu_policy: Policy, hami: HamiAnswer
) -> None:
    """Per node: does the pod fit, and on which GPUs (HAMi's answer for that node alone)."""
    for name in case.node_names:
        devices = fit_on_node(request, state.nodes[name], gpu_policy)
        hami_fits = name not in hami.failed
        if (devices is not None) != hami_fits:
            model = "fits" if devices is not None else "no"
            verdict.disagreements.append(("node-fit", f"{name}: model {model}, HAMi {hami.failed.get(name, 'fits')}"))
        elif devices is not None and name in hami.devices:
            _compare_shares(verdict, name, _gpu_shares(devices), _hami_shares(hami.devices[name]))


def _judge_choice(
    verdict: Verdict,
    case: FitCase,
    state: ClusterState,
    request: PodRequest,
    policies: tuple[Policy, Policy],
    hami: HamiAnswer,
) -> None:
    sim = Simulator(state, *policies)
    placement = sim.place(request, case.node_names)
    if placement is None or hami.node is None:
        return  # whether it fits at all is judged per node
    if placement.node == hami.node:
        encoded = hami.devices.get(hami.node)
        same_gpus = _gpu_shares(placement.containers) == _hami_shares(encoded)  # else counted as gpus
        if same_gpus and placement.encoded != encoded:  # the annotation as written, segments and all
            verdict.disagreements.append(("encoding", f"model {placement.encoded!r} HAMi {encoded!r}"))
        return
    if hami.node in state.nodes and sim.score(hami.node) == sim.score(placement.node):
        verdict.tie = True  # HAMi scores nodes in goroutines: the order among equal scores is arbitrary
    else:
        verdict.disagreements.append(("node", f"model {placement.node} HAMi {hami.node}"))


# ---- the report -------------------------------------------------------------------------------
def summary(seed: int, verdicts: list[Verdict], seconds: float) -> dict[str, Any]:
    kinds = Counter(kind for v in verdicts for kind, _ in v.disagreements)
    return {
        "seed": seed,
        "cases": len(verdicts),
        "disagreements": sum(kinds.values()),
        "by_kind": {k: kinds.get(k, 0) for k in KINDS},
        "cases_with_disagreements": sum(1 for v in verdicts if v.disagreements),
        "node_ties": sum(1 for v in verdicts if v.tie),
        "seconds": round(seconds, 1),
        "examples": [
            {"case": v.case, "kind": kind, "detail": detail} for v in verdicts for kind, detail in v.disagreements
        ][:40],
    }


def write_report(directory: Path, report: dict[str, Any]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fit-differential-seed{report['seed']}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def render(report: dict[str, Any]) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in report["by_kind"].items())
    return (
        f"seed {report['seed']}: {report['cases']} cases, {report['disagreements']} disagreements ({kinds}); "
        f"{report['node_ties']} node ties; {report['seconds']} s"
    )


# ---- HAMi's answers, kept: judge them again with another model (e.g. before a fix) -----------------
def save_answers(directory: Path, seed: int, answers: list[HamiAnswer]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"fit-differential-seed{seed}-hami.json"
    path.write_text(json.dumps({"seed": seed, "answers": [dataclasses.asdict(a) for a in answers]}) + "\n")
    return path


def rejudge(path: Path) -> dict[str, Any]:
    """The report for HAMi's saved answers, judged by the hami_place_core this process imports."""
    saved = json.loads(path.read_text())
    answers = [HamiAnswer(**a) for a in saved["answers"]]
    cases = generate(saved["seed"], len(answers))
    t0 = time.monotonic()
    return summary(saved["seed"], [judge(c, a) for c, a in zip(cases, answers, strict=True)], time.monotonic() - t0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.hami.fit_diff", description=rejudge.__doc__)
    parser.add_argument("answers", type=Path, nargs="+", help="fit-differential-seed*-hami.json files")
    args = parser.parse_args(argv)
    for path in args.answers:
        print(render(rejudge(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
