"""Option values (--step, --rollout-step, --parallel and their rca-lsp.toml / settings forms): numbers in ASCII
digits only, and anything else one line naming the option, never a ValueError traceback or a value read as another."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli import analyze_args

from rca_lsp.base.errors import InputError
from rca_lsp.cli.main import main
from rca_lsp.dumps.sources import ParallelLayout, StepSpan, parse_layout, parse_step, parse_step_number
from rca_lsp.server.pairing import Pair, Unpaired, find_pair
from rca_lsp.server.settings import Settings

# digits str.isdigit() passes that are not ASCII: superscript two (int() refuses it), Arabic-Indic two, fullwidth
# two and Devanagari two (int() reads them as 2)
OTHER_DIGITS = ["\u00b2", "\u0662", "\uff12", "\u0968"]


@pytest.mark.parametrize("digit", OTHER_DIGITS)
def test_numbers_in_other_digits_are_refused_by_every_parser(digit: str) -> None:
    for text in (f"tp={digit}", f"tp=2,pp={digit}"):
        with pytest.raises(InputError, match=r"--parallel: pp|tp must be a positive integer in ASCII digits"):
            parse_layout(text, "--parallel")
    for text in (digit, f"1-{digit}", f"{digit}-", f"-{digit}"):
        with pytest.raises(InputError, match="--rollout-step: expected a step number"):
            parse_step(text, "--rollout-step")
    with pytest.raises(InputError, match="--step: expected a step number"):
        parse_step_number(digit, "--step")


@pytest.mark.parametrize("text", ["tp=2,tp=4", "tp=2, TP=2", "pp=2,tp=2,pp=1"])
def test_a_dimension_given_twice_is_refused_not_read_as_its_last_value(text: str) -> None:
    dimension = text.split(",")[-1].split("=")[0].strip().lower()
    with pytest.raises(InputError, match=f"--parallel: {dimension} given twice"):
        parse_layout(text, "--parallel")


def test_ascii_numbers_still_read() -> None:
    assert parse_layout(" tp = 2 , pp=4") == ParallelLayout(tp=2, pp=4)
    assert parse_step(" 3 ") == 3 and parse_step("0-4") == StepSpan(0, 4) and parse_step_number("7") == 7
    for text in ("1_0", "+3", "-3", "3.0", ""):
        with pytest.raises(InputError):
            parse_step_number(text, "--step")


@pytest.mark.parametrize(
    ("option", "value"),
    [("--parallel", "tp=\u00b2"), ("--rollout-parallel", "tp=\u0662"), ("--rollout-step", "\u00b2")]
    + [("--step", "\u0662"), ("--step", "\u00b2"), ("--step", "1_0")],
)
def test_the_cli_says_a_bad_option_value_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    folder = FIXTURES / "tp2_healthy"
    for argv in (
        [*analyze_args(folder, tmp_path / "out"), option, value],
        ["suggest-mapping", "--train", str(folder / "train"), "--rollout", str(folder / "rollout")]
        + ["-o", str(tmp_path / "m.json"), option, value],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and option in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "m.json").exists()


def _config(tmp_path: Path, options: str) -> Path:
    root = tmp_path / "ws"
    shutil.copytree(FIXTURES / "tp2_healthy", root)
    (root / "rca-lsp.toml").write_text(
        f'[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "train"\nrollout = "rollout"\n{options}\n'
    )
    return root / "mapping_key.json"


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ("step = true", "step must be a step number"),
        ("rollout_step = false", "rollout_step must be a step number"),
        ('parallel = "tp=\u00b2"', "tp must be a positive integer in ASCII digits"),
        ('rollout_parallel = "tp=\u0662"', "tp must be a positive integer in ASCII digits"),
        ('rollout_step = "\u00b2"', "expected a step number"),
    ],
)
def test_a_bad_value_in_rca_lsp_toml_is_a_problem_of_the_pair(tmp_path: Path, options: str, problem: str) -> None:
    """The server publishes the problem (an exception here was its "internal error")."""
    mapping = _config(tmp_path, options)
    found = find_pair(mapping, (), [mapping.parent])
    assert isinstance(found, Unpaired) and problem in (found.problem or ""), found
    assert str(mapping.parent / "rca-lsp.toml") in (found.problem or "")


def test_a_boolean_step_in_the_settings_is_a_problem() -> None:
    _, problems = Settings.from_client(
        {"pairs": [{"mappingKey": "m", "train": "t", "rollout": "r", "step": True, "rolloutStep": False}]}
    )
    assert problems == ["rcaLsp.pairs[0].step must be a step number (0, 1, ...)"]


def test_a_good_toml_still_pairs(tmp_path: Path) -> None:
    mapping = _config(tmp_path, 'step = 0\nparallel = "tp=2"')
    found = find_pair(mapping, (), [mapping.parent])
    assert isinstance(found, Pair) and found.train.layout == ParallelLayout(tp=2) and found.train.step == 0


# --- fuzzing: any option text gives a value or one InputError naming the option -----------------------------------

option_texts = st.one_of(
    st.text(max_size=12),
    st.from_regex(r"\s*(tp|pp|ep|dp|TP|xx)?\s*=?\s*[0-9\u00b2\u0660-\u0669\uff10-\uff19_+\-]{0,4}", fullmatch=True),
    st.builds(
        lambda parts: ",".join(parts),
        st.lists(st.from_regex(r"(tp|pp|ep|dp)=[0-9\u00b2\u0662]{1,3}", fullmatch=True), max_size=4),
    ),
    st.from_regex(r"[0-9\u00b2\u0662]{0,3}-?[0-9\u00b2\u0662]{0,3}|all|ALL", fullmatch=True),
)


@settings(max_examples=400, deadline=None)
@given(option_texts)
def test_any_option_text_reads_or_gives_one_input_error(text: str) -> None:
    for parse, where in ((parse_layout, "--parallel"), (parse_step, "--rollout-step"), (parse_step_number, "--step")):
        try:
            value = parse(text, where)  # type: ignore[operator]
        except InputError as error:
            assert error.path == where and "\n" not in str(error)
            continue
        if isinstance(value, ParallelLayout):
            assert all(v is None or v >= 1 for v in (value.tp, value.pp, value.ep, value.dp))
            assert str(value) == "" or parse_layout(str(value)) == value  # what it says reads back as itself
        assert not any(c.isdigit() and not c.isascii() for c in text) or value is None
