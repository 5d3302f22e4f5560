"""Binary lookup order of the test bed (pure logic, no processes)."""

from __future__ import annotations

from pathlib import Path

from toolchain import build


def test_kubebuilder_assets_takes_precedence_over_the_cache(tmp_path, monkeypatch) -> None:
    fake = tmp_path / "kube-apiserver"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    monkeypatch.delenv("TEST_ASSET_KUBE_APISERVER", raising=False)
    assert build.locate("kube-apiserver") == fake
    monkeypatch.setenv("TEST_ASSET_KUBE_APISERVER", "/bin/true")
    assert build.locate("kube-apiserver") == Path("/bin/true")


def test_cache_key_names_every_pinned_version() -> None:
    v = build.Versions.pinned()
    key = v.cache_key()
    assert v.kubernetes.startswith("v1.36.") and v.etcd.startswith("v3.6.")
    for part in (v.kubernetes, v.etcd, v.kwok, v.helm):
        assert part in key
