"""Snapshots shipped with the package, so ``inspect --snapshot example`` works with no cluster.

``example`` is a replay of the openb GPU-cluster trace (Alibaba clusterdata
cluster-trace-gpu-v2023, CC BY 4.0; Weng et al., USENIX ATC '23) with HAMi's default placement:
1,213 nodes, 6,212 GPUs, fairly full and fragmented. docs/openb.md says how it was made.
"""

from __future__ import annotations

import atexit
import gzip
import os
import tempfile
import zlib
from importlib import resources
from pathlib import Path

EXAMPLES = {"example": "openb-example.json.gz"}
_PACKAGE = "hami_place_core.data"
_GZIP_MAGIC = b"\x1f\x8b"


def resolve_snapshot(name_or_path: str | os.PathLike[str]) -> Path:
    """The packaged file for a known example name, otherwise the path unchanged.

    A file of that name in the working directory does not shadow the example: pass ``./example``.
    """
    name = os.fspath(name_or_path)
    if name not in EXAMPLES:
        return Path(name)
    ref = resources.files(_PACKAGE) / EXAMPLES[name]
    if isinstance(ref, Path):
        return ref
    # Packaged in a zip (zipimport): copy it out once per process.
    fd, tmp = tempfile.mkstemp(prefix="hami-place-", suffix=f"-{EXAMPLES[name]}")
    with os.fdopen(fd, "wb") as f:
        f.write(ref.read_bytes())
    atexit.register(os.unlink, tmp)
    return Path(tmp)


def open_snapshot_text(path: str | os.PathLike[str]) -> str:
    """The text of a snapshot file, gunzipped if it is gzip data (by content, not by name).

    Raises OSError for anything that cannot be read or decoded, so callers that report a file they
    cannot read (``load_snapshot``) need one ``except OSError``.
    """
    raw = Path(path).read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise OSError(f"corrupt gzip data: {e}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise OSError(f"not UTF-8 text ({e.reason} at byte {e.start})") from None
