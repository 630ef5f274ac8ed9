"""Neovim's built-in LSP client (headless), configured with the README's Neovim 0.7 configuration, against
`rca-lsp serve` on real fixtures."""

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

PROBE = Path(__file__).with_name("probe.lua")
NVIM = shutil.which("nvim")


@pytest.mark.skipif(NVIM is None and not os.environ.get("CI_REQUIRE_NVIM"), reason="neovim is not installed")
@pytest.mark.parametrize(
    "variant, code",
    [
        ("missing_activation", "missing-op"),
        ("param_desync", "parameter-sync"),
        ("vllm_missing_activation", "missing-op"),
        ("tp2_sp_replica_desync", "rank-disagreement"),
        ("pp2_in_module_diff", "in-module-diff"),
        ("decode_norm_eps", "in-module-diff"),
        ("tp2_dp2_same_data_replica_drift", "rank-disagreement"),
        ("moe_ep2_own_data_expert_desync", "parameter-sync"),
        ("vllm_tp2_decode_steps_rank_desync", "in-module-diff"),
        ("sglang_param_desync", "parameter-sync"),
        ("fsdp1_norm_eps_rank1", "in-module-diff"),
        ("fsdp2_other_data", "input-data"),
        ("fsdp2_vllm_norm_eps_rank1", "in-module-diff"),
    ],
)
def test_neovim_sees_diagnostics_and_hover(workspace, tmp_path: Path, variant: str, code: str) -> None:
    assert NVIM is not None, "CI_REQUIRE_NVIM is set but nvim is missing"
    mapping = workspace(variant)
    init = tmp_path / "init.lua"
    init.write_text(editor_config("neovim"))
    out = tmp_path / "nvim.json"
    env = dict(
        os.environ,
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),  # the README's rca-lsp
        RCA_FILE=str(mapping),
        RCA_OUT=str(out),
        RCA_WANTED_CODE=code,
        XDG_CONFIG_HOME=str(tmp_path),
        XDG_DATA_HOME=str(tmp_path),
        XDG_STATE_HOME=str(tmp_path),
    )
    subprocess.run(
        [NVIM, "--headless", "-u", str(init), "-c", f"luafile {PROBE}"],
        env=env,
        timeout=90,
        check=True,
        capture_output=True,
    )
    result = json.loads(out.read_text())
    assert [c["name"] for c in result["clients"]] == ["rca-lsp"], "the README configuration attached no client"
    rows = [r for r in result["diagnostics"] if r["code"] == code]
    assert rows, result["diagnostics"]
    truth = expected(variant)["root_cause"]["train_key"]
    assert f'"{truth}"' in mapping.read_text().split("\n")[rows[0]["lnum"]]
    assert result["hover"] and expected(variant)["root_cause"]["classification"] in result["hover"]
