"""Keys with bidi overrides (U+202E reorders what follows it: "Trojan Source"), line breaks or HTML are shown escaped
wherever a person reads them: hovers, diagnostics, CLI warnings and summaries, one-line errors (base.display.shown,
the one escaping function; report.mdtext on top of it for Markdown)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import cmarkgfm
from adversarial import BIDI, HTML, hostile_copy
from cmarkgfm.cmark import Options
from pygls.workspace import PositionCodec

from rca_lsp.base.display import shown
from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.server.diagnostics import KindCap, issue_diagnostics
from rca_lsp.server.features.hover import hover_markdown
from rca_lsp.server.positions import Positions

CONTROLS = ("\u202e", "\u202c", "\u2066", "\u200b", "\x1b", "\n", "\r", "\x00")


def test_shown_escapes_what_is_not_printable_and_keeps_the_rest() -> None:
    assert shown("Module.model.layers.0.mlp.linear_fc2 → é 中") == "Module.model.layers.0.mlp.linear_fc2 → é 中"
    assert shown("a\u202eb\nc\x1bd\U000e0001") == "a\\u202eb\\nc\\x1bd\\U000e0001"
    assert all(shown(f"x{c}y").isprintable() for c in CONTROLS)


def test_a_one_line_error_stays_one_line() -> None:
    assert (
        str(InputError("dir\n/dump.json", f"bad key {BIDI}", 3, 4))
        == "dir\\n/dump.json:3:4: bad key \\u202eevil\\u202c"
    )


def hostile_analysis(tmp_path: Path, text: str):
    folder = hostile_copy("missing_activation", tmp_path / "pair", "mlp.linear_fc2", f"mlp.linear{text}fc2")
    mapping = json.loads((folder / "mapping_key.json").read_text())
    key = next(k for k in mapping if f"linear{text}fc2" in k)
    mapping[key.replace("RowParallelLinear", "RowParalelLinear")] = mapping[key]  # a typo: the key is "closest"
    (folder / "mapping_key.json").write_text(json.dumps(mapping, indent=2))
    analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
    return folder, analysis, key


def test_a_hover_shows_a_hostile_key_as_text(tmp_path: Path) -> None:
    for text in (BIDI, HTML, "\n# heading\n<script>alert(1)</script>"):
        _, analysis, key = hostile_analysis(tmp_path / str(len(text)), text)
        hover = hover_markdown(analysis, key, None)
        assert hover is not None and not any(c in hover for c in CONTROLS[:4])
        assert hover.count("\n") == hover_markdown(analysis, key, None).count("\n")  # deterministic
        rendered = cmarkgfm.github_flavored_markdown_to_html(hover, options=Options.CMARK_OPT_UNSAFE)
        assert not re.search(r"<(script|img|svg)", rendered) and "<h1" not in rendered


def test_diagnostics_and_cli_warnings_escape_keys(tmp_path: Path) -> None:
    folder, analysis, _ = hostile_analysis(tmp_path, BIDI)
    positions = Positions(analysis.mapping, PositionCodec())
    messages = [
        d.message for d in issue_diagnostics(analysis.issues, positions, lambda code, default: default, KindCap(500))
    ]
    assert any("\\u202eevil" in message for message in messages)
    assert not any(c in message for message in messages for c in CONTROLS)
    result = subprocess.run(
        [sys.executable, "-m", "rca_lsp", "analyze", "--train", "train", "--rollout", "rollout", "--mapping-key",
         "mapping_key.json", "--out-dir", "out", "--no-chart"],
        cwd=folder, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "\\u202eevil" in result.stderr and "\\u202eevil" in result.stdout
    assert not any(c in result.stdout + result.stderr for c in CONTROLS[:4])
