"""export-mapping writes only the rules it means: text from keys and paths (line breaks, YAML syntax, bidi controls,
characters beyond the BMP) can neither end a comment nor become a rule, and every name reads back as itself (the
real CLI on fixture copies with hostile keys; Hypothesis over arbitrary text)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from adversarial import BIDI, NEWLINE_RULE, hostile_copy
from conftest import FIXTURES
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rca_lsp.cli.main import main
from rca_lsp.mapping.export import Exported, _line

YAML_BREAKS = ("\n", "\r", "\r\n", "\x85", "\u2028", "\u2029")


def export(folder: Path, mapping: Path, kind: str, out: Path) -> str:
    argv = ["export-mapping", "--train", str(folder / "train"), "--rollout", str(folder / "rollout")]
    assert main([*argv, "--mapping-key", str(mapping), "--format", kind, "-o", str(out)]) == 0
    return out.read_text()


def rules_of(text: str) -> list[str]:
    """The lines a YAML reader takes as content (not comments)."""
    return [line for line in text.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("kind", ["data", "cell"])
@pytest.mark.parametrize("text", [NEWLINE_RULE, *(f"{b}Module.evil.Linear: Module.evil.Linear" for b in YAML_BREAKS)])
def test_a_line_break_in_a_key_left_as_a_comment_makes_no_rule(tmp_path: Path, kind: str, text: str) -> None:
    """An entry with no msprobe equivalent is named in a comment: a line break in it ended the comment."""
    folder = tmp_path / "pair"
    shutil.copytree(FIXTURES / "missing_activation", folder)
    plain = export(folder, folder / "mapping_key.json", kind, tmp_path / "plain.yaml")
    mapping = json.loads((folder / "mapping_key.json").read_text())
    mapping[f"Module.module.missing{text}.Linear.forward.0"] = f"Module.model.missing{text}.Linear.forward.0"
    mapping[next(iter(mapping))] = [f"Module.model.a{text}.Linear.forward.0", "Module.model.b.Linear.forward.0"]
    hostile = tmp_path / f"mapping{text[:1]}_key.json"  # the path is in a comment too
    hostile.write_text(json.dumps(mapping))
    written = export(folder, hostile, kind, tmp_path / "hostile.yaml")
    assert yaml.safe_load(written) == {k: v for k, v in yaml.safe_load(plain).items() if k in yaml.safe_load(written)}
    assert "evil" not in "".join(rules_of(written)) and len(rules_of(written)) <= len(rules_of(plain))
    assert written.replace("\n", "").isprintable() and "missing" in written  # escaped, not left out


@pytest.mark.parametrize("kind", ["data", "cell"])
@pytest.mark.parametrize("text", ["\n#", BIDI, "\U0001f600", "\x85", '": "x', "\t\\"])
def test_a_hostile_key_in_the_dumps_reads_back_as_itself(tmp_path: Path, kind: str, text: str) -> None:
    """A written rule names the key exactly (YAML escapes), nothing more: msprobe reads what the dumps hold."""
    folder = hostile_copy("missing_activation", tmp_path / "pair", "mlp.down_proj", f"mlp.down{text}proj")
    written = export(folder, folder / "mapping_key.json", kind, tmp_path / "out.yaml")
    names = [name for pair in yaml.safe_load(written).items() for name in pair]
    assert any(f"down{text}proj" in name for name in names)
    assert written.replace("\n", "").isprintable()  # escaped: no control or bidi character shown as it is


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1), st.text(min_size=1), st.lists(st.text(), max_size=3))
@example("\u0301" * 300, "x", [])  # escaped, longer than a YAML key may be written plainly: an explicit key
def test_any_names_and_comments_give_exactly_the_rules_written(left: str, right: str, comments: list[str]) -> None:
    exported = Exported("cell", lines=[_line(left, right)], comments=comments)
    exported.read_back = comments
    assert yaml.safe_load(exported.text("".join(comments))) == {left: right}


def test_a_long_name_reads_back_through_rca_lsps_reader_too() -> None:
    from rca_lsp.mapping.msprobe_yaml import parse_msprobe_mapping

    left = "model." + "very_long." * 150 + "Linear"
    parsed = parse_msprobe_mapping("cell_mapping.yaml", Exported("cell", lines=[_line(left, "b.Linear")]).text("m"))
    assert [(rule.left, rule.right) for rule in parsed.rules] == [(left, "b.Linear")] and not parsed.issues
