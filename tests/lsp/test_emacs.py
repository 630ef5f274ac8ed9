"""Emacs' eglot (batch), configured with the README's Emacs configuration, against `rca-lsp serve` on real fixtures."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import expected
from readme_config import editor_config

from rca_lsp import __version__

PROBE = Path(__file__).with_name("probe.el")
EMACS = shutil.which("emacs")


@pytest.mark.skipif(EMACS is None and not os.environ.get("CI_REQUIRE_EMACS"), reason="emacs is not installed")
@pytest.mark.parametrize(
    "variant, code",
    [("missing_activation", "missing-op"), ("tp2_sp_replica_desync", "rank-disagreement")],
)
def test_eglot_sees_diagnostics_and_hover(workspace, tmp_path: Path, variant: str, code: str) -> None:
    assert EMACS is not None, "CI_REQUIRE_EMACS is set but emacs is missing"
    mapping = workspace(variant)
    init = tmp_path / "init.el"
    init.write_text(editor_config("emacs"))
    out = tmp_path / "eglot.json"
    env = dict(
        os.environ,
        HOME=str(tmp_path),  # no user init, no ~/.emacs.d
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),  # the README's rca-lsp
        RCA_FILE=str(mapping),
        RCA_OUT=str(out),
        RCA_WANTED_CODE=code,
    )
    # --batch loads the site start files (Debian's elpa packages), not a user init: the README's init.el is loaded
    # in its place.
    run = subprocess.run(
        [EMACS, "--batch", "-l", str(init), "-l", str(PROBE)], env=env, timeout=90, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "rca-lsp-mapping-mode"
    assert result["server"] == {"name": "rca-lsp", "version": __version__}
    rows = [r for r in result["diagnostics"] if r["code"] == code]
    assert rows, result["diagnostics"]
    assert rows[0]["type"] == "eglot-warning"
    truth = expected(variant)["root_cause"]["train_key"]
    assert f'"{truth}"' in mapping.read_text().split("\n")[rows[0]["line"]]
    assert result["hover"] and expected(variant)["root_cause"]["classification"] in result["hover"]
