"""Every output file of every committed fixture is byte for byte what it was when the digests were taken: speed work
on the comparison and the tables (statistics as arrays, tables from columns) must not change a single cell.

The digests (tests/data/output_digests.json) were taken with the code before that work. Files are normalised only
where a run differs by nature: the run id, the absolute fixture folder (a clone lives elsewhere), the chart page's
packed blocks (compared as the chart data they decode to). The PNG is left out (matplotlib's bytes follow its
version) and so is the manifest (it lists the other files' sizes and digests).

When an output is meant to change, take the digests again and say why in the commit:
`RCA_UPDATE_OUTPUT_DIGESTS=1 .venv/bin/python -m pytest tests/test_outputs_unchanged.py`."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import orjson
import pytest
from conftest import FIXTURES, rollout_options, variants

import rca_lsp.report.outputs as outputs
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.report.html import chart_from_page

DIGESTS = Path(__file__).parent / "data" / "output_digests.json"
UPDATE = os.environ.get("RCA_UPDATE_OUTPUT_DIGESTS") == "1"
LEFT_OUT = {"output_5_root_cause_report.png", "output_manifest.json"}
_PACKED_BLOCK = re.compile(r'(<script id="[^"]+" type="application/gzip;base64">)[^<]*(</script>)')


def _normalised(name: str, data: bytes, folder: Path) -> bytes:
    absolute = str(folder).encode()
    if name.endswith(".html"):
        page = data.decode()
        chart = orjson.dumps(chart_from_page(page), option=orjson.OPT_SORT_KEYS)
        data = _PACKED_BLOCK.sub(r"\1\2", page).encode() + b"\n" + chart
    return data.replace(absolute, b"<fixture>")


def _digests(variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    folder = FIXTURES / variant
    monkeypatch.setattr(outputs, "new_run_id", lambda: "run-id")
    analysis = analyze_paths(
        folder / "train", folder / "rollout", folder / "mapping_key.json", rollout_options=rollout_options(variant)
    )
    found: dict[str, str] = {}
    for style in ("rca", "msprobe"):
        out_dir = tmp_path / style
        outputs.write_outputs(analysis, out_dir, columns=style, chart=style == "rca")
        for path in sorted(out_dir.iterdir()):
            if path.name in LEFT_OUT or (style == "msprobe" and "value_compare" not in path.name):
                continue
            found[f"{style}/{path.name}"] = hashlib.sha256(
                _normalised(path.name, path.read_bytes(), folder)
            ).hexdigest()
    return found


def _stored() -> dict[str, dict[str, str]]:
    return json.loads(DIGESTS.read_text()) if DIGESTS.is_file() else {}


@pytest.mark.parametrize("variant", variants())
def test_outputs_are_unchanged(variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = _digests(variant, tmp_path, monkeypatch)
    if UPDATE:
        stored = _stored()
        stored[variant] = found
        DIGESTS.parent.mkdir(exist_ok=True)
        DIGESTS.write_text(json.dumps(dict(sorted(stored.items())), indent=1) + "\n")
        return
    expected = _stored().get(variant)
    assert expected is not None, f"no digests for {variant}: take them (see the module docstring)"
    changed = sorted(name for name in expected.keys() | found.keys() if expected.get(name) != found.get(name))
    assert not changed, f"{variant}: outputs changed: {changed}"
