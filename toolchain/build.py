"""Find or build the test bed's binaries from the pinned Go modules in toolchain/tools/.

Lookup order for each binary, as envtest does:
  1. ``TEST_ASSET_<NAME>`` (e.g. ``TEST_ASSET_KUBE_APISERVER``), a path to that one binary;
  2. ``$KUBEBUILDER_ASSETS/<name>``;
  3. the per-user cache, ``$HAMI_PLACE_CACHE`` or ``$XDG_CACHE_HOME/hami-place`` or
     ``~/.cache/hami-place``, in a directory keyed by the pinned versions and go.sum hashes.
Anything still missing is built into the cache with ``go build`` through the module proxy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TOOLS = Path(__file__).resolve().parent / "tools"

K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ALL_BINARIES = (*K8S_BINARIES, "etcd", "kwok", "helm")


class BuildError(RuntimeError):
    """The binaries could not be found or built; the message says which command failed."""


def _require(module: str, path: Path) -> str:
    text = (path / "go.mod").read_text()
    m = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.M)
    if not m:
        raise BuildError(f"{path}/go.mod does not require {module}")
    return m.group(1)


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str
    helm: str

    @classmethod
    def pinned(cls) -> Versions:
        return cls(
            kubernetes=_require("k8s.io/kubernetes", TOOLS / "k8s"),
            etcd=_require("go.etcd.io/etcd/server/v3", TOOLS / "k8s"),
            kwok=_require("sigs.k8s.io/kwok", TOOLS / "kwok"),
            helm=_require("helm.sh/helm/v3", TOOLS / "helm"),
        )

    def cache_key(self) -> str:
        digest = hashlib.sha256()
        for sub in ("k8s", "kwok", "helm"):
            for name in ("go.mod", "go.sum"):
                digest.update((TOOLS / sub / name).read_bytes())
        return f"k8s-{self.kubernetes}_etcd-{self.etcd}_kwok-{self.kwok}_helm-{self.helm}_{digest.hexdigest()[:10]}"


def cache_root() -> Path:
    if os.environ.get("HAMI_PLACE_CACHE"):
        return Path(os.environ["HAMI_PLACE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hami-place"


def cache_bin_dir(versions: Versions | None = None) -> Path:
    versions = versions or Versions.pinned()
    return cache_root() / "testbed-bin" / versions.cache_key()


def _env_name(binary: str) -> str:
    return "TEST_ASSET_" + binary.upper().replace("-", "_")


def locate(binary: str, bin_dir: Path | None = None) -> Path | None:
    candidates = []
    if os.environ.get(_env_name(binary)):
        candidates.append(Path(os.environ[_env_name(binary)]))
    if os.environ.get("KUBEBUILDER_ASSETS"):
        candidates.append(Path(os.environ["KUBEBUILDER_ASSETS"]) / binary)
    candidates.append((bin_dir or cache_bin_dir()) / binary)
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    return None


def _k8s_ldflags(version: str) -> str:
    # Without these, /version says v0.0.0-master and clients that compare versions (helm's
    # kubeVersion, kubectl's skew warning) misbehave. Same -X set as hack/lib/version.sh.
    major, minor = version.lstrip("v").split(".")[:2]
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [
            f"-X {pkg}.gitVersion={version}",
            f"-X {pkg}.gitMajor={major}",
            f"-X {pkg}.gitMinor={minor}",
            f"-X {pkg}.gitTreeState=clean",
            f"-X {pkg}.buildDate=1970-01-01T00:00:00Z",
        ]
    return " ".join(flags)


def _helm_ldflags(versions: Versions) -> str:
    minor = versions.kubernetes.lstrip("v").split(".")[1]
    base = "helm.sh/helm/v3"
    return " ".join(
        [
            "-s -w",
            f"-X {base}/internal/version.version={versions.helm}",
            f"-X {base}/pkg/lint/rules.k8sVersionMajor=1",
            f"-X {base}/pkg/lint/rules.k8sVersionMinor={minor}",
            f"-X {base}/pkg/chartutil.k8sVersionMajor=1",
            f"-X {base}/pkg/chartutil.k8sVersionMinor={minor}",
        ]
    )


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # Never let go fetch a newer toolchain: the pins are chosen to build with the local Go.
    env.update(GOTOOLCHAIN="local", CGO_ENABLED="0", GOFLAGS="-trimpath -mod=readonly -buildvcs=false")
    return env


def _run(cmd: list[str], cwd: Path, log) -> None:  # type: ignore[no-untyped-def]
    log(f"$ (cd {cwd.relative_to(TOOLS.parent.parent)} && {' '.join(cmd)})")
    proc = subprocess.run(cmd, cwd=cwd, env=_go_env(), capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"command failed (exit {proc.returncode}) in {cwd}: {' '.join(cmd)}\n{proc.stderr[-4000:]}")


def build(bin_dir: Path, missing: list[str], log=print) -> dict[str, float]:  # type: ignore[no-untyped-def]
    """Build the missing binaries into bin_dir. Returns seconds per group."""
    go = shutil.which("go")
    if not go:
        raise BuildError(
            "Go >= 1.26 is needed once to build the test bed's binaries (or set "
            "KUBEBUILDER_ASSETS to a directory holding: " + ", ".join(ALL_BINARIES) + ")"
        )
    versions = Versions.pinned()
    tmp = bin_dir.with_name(bin_dir.name + ".partial")
    tmp.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    k8s = [b for b in missing if b in K8S_BINARIES]
    if k8s:
        t0 = time.monotonic()
        pkgs = [f"k8s.io/kubernetes/cmd/{b}" for b in k8s]
        _run(
            [go, "build", "-ldflags", _k8s_ldflags(versions.kubernetes), "-o", str(tmp) + "/", *pkgs],
            TOOLS / "k8s",
            log,
        )
        timings["kubernetes"] = time.monotonic() - t0
    if "etcd" in missing:
        t0 = time.monotonic()
        _run(
            [go, "build", "-ldflags", "-s -w", "-o", str(tmp / "etcd"), "go.etcd.io/etcd/server/v3"], TOOLS / "k8s", log
        )
        timings["etcd"] = time.monotonic() - t0
    if "kwok" in missing:
        t0 = time.monotonic()
        _run(
            [
                go,
                "build",
                "-ldflags",
                f"-s -w -X sigs.k8s.io/kwok/pkg/consts.Version={versions.kwok}",
                "-o",
                str(tmp / "kwok"),
                "sigs.k8s.io/kwok/cmd/kwok",
            ],
            TOOLS / "kwok",
            log,
        )
        timings["kwok"] = time.monotonic() - t0
    if "helm" in missing:
        t0 = time.monotonic()
        _run(
            [go, "build", "-ldflags", _helm_ldflags(versions), "-o", str(tmp / "helm"), "helm.sh/helm/v3/cmd/helm"],
            TOOLS / "helm",
            log,
        )
        timings["helm"] = time.monotonic() - t0
    bin_dir.mkdir(parents=True, exist_ok=True)
    for f in tmp.iterdir():
        os.replace(f, bin_dir / f.name)  # atomic per file: a crashed build never leaves half a binary
    tmp.rmdir()
    info_path = bin_dir / "build-info.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    info.update({"versions": versions.__dict__, "seconds": {**info.get("seconds", {}), **timings}})
    info_path.write_text(json.dumps(info, indent=2))
    return timings


# kwok ships its default Stages (what makes a node Ready and a bound pod Running) as YAML in
# its module, not inside the binary's defaults. They are taken from the same pinned module.
KWOK_STAGES = "kwok-stages.yaml"
_KWOK_STAGE_FILES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


def ensure_kwok_stages(bin_dir: Path, log=print) -> Path:  # type: ignore[no-untyped-def]
    for candidate in (
        Path(os.environ["KUBEBUILDER_ASSETS"]) / KWOK_STAGES if os.environ.get("KUBEBUILDER_ASSETS") else None,
        bin_dir / KWOK_STAGES,
    ):
        if candidate and candidate.is_file():
            return candidate
    go = shutil.which("go")
    if not go:
        raise BuildError(f"{KWOK_STAGES} is missing and Go is not installed to fetch the pinned kwok module")
    versions = Versions.pinned()
    log(f"extracting kwok {versions.kwok} default stages into {bin_dir}")
    proc = subprocess.run(
        [go, "mod", "download", "-json", f"sigs.k8s.io/kwok@{versions.kwok}"],
        cwd=TOOLS / "kwok",
        env=_go_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise BuildError(f"go mod download sigs.k8s.io/kwok@{versions.kwok} failed:\n{proc.stderr[-2000:]}")
    module_dir = Path(json.loads(proc.stdout)["Dir"])
    docs = [(module_dir / rel).read_text().strip() for rel in _KWOK_STAGE_FILES]
    bin_dir.mkdir(parents=True, exist_ok=True)
    out = bin_dir / KWOK_STAGES
    header = f"# Generated from sigs.k8s.io/kwok@{versions.kwok} ({', '.join(_KWOK_STAGE_FILES)})\n"
    out.write_text(header + "\n---\n".join(docs) + "\n")
    return out


def ensure_binaries(log=print) -> dict[str, Path]:  # type: ignore[no-untyped-def]
    """Return name -> path for every test-bed binary (and the kwok stages), building what is missing."""
    bin_dir = cache_bin_dir()
    missing = [b for b in ALL_BINARIES if locate(b, bin_dir) is None]
    if missing:
        log(f"building {', '.join(missing)} into {bin_dir} (one-time; see docs/testing.md)")
        build(bin_dir, missing, log)
    found = {b: locate(b, bin_dir) for b in ALL_BINARIES}
    absent = [b for b, p in found.items() if p is None]
    if absent:
        raise BuildError(f"still missing after build: {', '.join(absent)}")
    result = {b: p for b, p in found.items() if p is not None}
    result[KWOK_STAGES] = ensure_kwok_stages(bin_dir, log)
    result["krew"] = ensure_krew(log)
    result["actionlint"] = ensure_actionlint(log)
    return result


def ensure_krew(log=print) -> Path:  # type: ignore[no-untyped-def]
    """krew, for the plugin's install test (tests/cli/test_release.py)."""
    version = _require("sigs.k8s.io/krew", TOOLS / "krew")
    return _ensure_tool(
        "krew",
        version,
        "sigs.k8s.io/krew/cmd/krew",
        f"-s -w -X sigs.k8s.io/krew/internal/version.gitTag={version}",
        log,
    )


def ensure_actionlint(log=print) -> Path:  # type: ignore[no-untyped-def]
    """actionlint, for the workflow test (tests/release/test_workflows.py)."""
    version = _require("github.com/rhysd/actionlint", TOOLS / "actionlint")
    return _ensure_tool(
        "actionlint",
        version,
        "github.com/rhysd/actionlint/cmd/actionlint",
        f"-s -w -X github.com/rhysd/actionlint.version={version}",
        log,
    )


def _ensure_tool(name: str, version: str, package: str, ldflags: str, log) -> Path:  # type: ignore[no-untyped-def]
    """A tool of its own pinned module (toolchain/tools/<name>/), cached apart from the control plane
    binaries in testbed-bin/<name>-<version>/, so changing its pin never rebuilds Kubernetes.
    TEST_ASSET_<NAME> and KUBEBUILDER_ASSETS are honoured as for the others."""
    bin_dir = cache_root() / "testbed-bin" / f"{name}-{version}"
    found = locate(name, bin_dir)
    if found is not None:
        return found
    go = shutil.which("go")
    if not go:
        raise BuildError(f"{name} is missing and Go is not installed to build it (see docs/testing.md)")
    log(f"building {name} {version} into {bin_dir} (one-time)")
    tmp = bin_dir.with_name(bin_dir.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    _run([go, "build", "-ldflags", ldflags, "-o", str(tmp / name), package], TOOLS / name, log)
    bin_dir.mkdir(parents=True, exist_ok=True)
    os.replace(tmp / name, bin_dir / name)
    tmp.rmdir()
    return bin_dir / name


if __name__ == "__main__":
    for name, path in ensure_binaries(log=lambda m: print(m, file=sys.stderr)).items():
        print(f"{name}\t{path}")
