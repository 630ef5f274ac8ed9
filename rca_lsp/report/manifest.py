"""The run manifest of an out-dir: which output files one run wrote, written after all of them.

An interrupted run leaves the files it had finished, next to older ones of another analysis. Each run has an
id, carried by the manifest and by every output file whose format has room for it (the JSON tables' "meta", the
report's "run_id", a line of the Markdown report); a reader holding a manifest whose listed files all exist with
the listed sizes (and, where they carry one, its run id) has a complete set. A run removes the previous
manifest before writing anything, so an interrupted run leaves none.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any, Sequence

import orjson

from rca_lsp.base.atomicfile import write_atomically

MANIFEST_NAME = "output_manifest.json"


def new_run_id() -> str:
    """UTC time of the run and a random part: sortable, and distinct for runs of the same second."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


def forget_manifest(out_dir: Path) -> None:
    """Remove the previous run's manifest: from now on the folder is not a complete set until the new one."""
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)


def write_manifest(out_dir: Path, meta: dict[str, Any], written: Sequence[Path]) -> Path:
    """The manifest of the files `written` (which must all exist), with `meta` (tool, version, run id, inputs)."""
    files = [{"name": path.name, "bytes": path.stat().st_size} for path in written]
    document = {**meta, "complete": True, "files": files}
    path = out_dir / MANIFEST_NAME
    write_atomically(path, orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    return path
