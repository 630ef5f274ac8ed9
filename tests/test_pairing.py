"""Which dumps a mapping file is analysed against (settings, then rca-lsp.toml, then convention), and the settings
contract the clients rely on (camelCase keys, problems reported, never an exception)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES

from rca_lsp.dumps.sources import ParallelLayout
from rca_lsp.server.pairing import Pair, Unpaired, find_pair
from rca_lsp.server.settings import PairSetting, Settings


def workspace(tmp_path: Path) -> Path:
    """A folder with a mapping file next to train/ and rollout/ (convention) and two other dump folders."""
    root = tmp_path / "ws"
    for name, variant in (("exp", "missing_activation"), ("other", "param_desync"), ("ranks", "tp2_healthy")):
        shutil.copytree(FIXTURES / variant, root / name)
    return root


def test_convention_pairs_the_folders_next_to_the_mapping(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    pair = find_pair(root / "exp" / "mapping_key.json", (), [root])
    assert isinstance(pair, Pair) and pair.source.startswith("convention")
    assert pair.train.files == ((root / "exp/train/step0/rank0/dump.json").resolve(),)


def test_a_config_file_wins_over_convention_and_carries_step_and_layout(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    (root / "exp" / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "../ranks/train"\nrollout = "../other/rollout"\n'
        'step = 0\nparallel = "tp=2"\n'
    )
    pair = find_pair(root / "exp" / "mapping_key.json", (), [root])
    assert isinstance(pair, Pair) and pair.source.endswith("rca-lsp.toml")
    assert len(pair.train.files) == 2 and pair.train.layout == ParallelLayout(tp=2) and pair.train.step == 0
    assert "other" in str(pair.rollout.root)
    (root / "exp" / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "train"\nrollout = "rollout"\nparallel = "tq=2"\n'
    )
    bad = find_pair(root / "exp" / "mapping_key.json", (), [root])
    assert isinstance(bad, Unpaired) and "unknown parallel dimension 'tq'" in (bad.problem or "")


def test_settings_win_over_a_config_file(tmp_path: Path) -> None:
    root = workspace(tmp_path)
    (root / "exp" / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "../ranks/train"\nrollout = "rollout"\n'
    )
    setting = PairSetting(
        "${workspaceFolder}/exp/mapping_key.json", "${workspaceFolder}/other/train", "${workspaceFolder}/other/rollout"
    )
    pair = find_pair(root / "exp" / "mapping_key.json", (setting,), [root])
    assert isinstance(pair, Pair) and pair.source == "settings rcaLsp.pairs"
    assert "other" in str(pair.train.root)


def test_settings_from_the_client() -> None:
    settings, problems = Settings.from_client(
        {
            "rcaLsp": {
                "pairs": [
                    {
                        "mappingKey": "m.json",
                        "train": "t",
                        "rollout": "r",
                        "step": 3,
                        "parallel": "tp=2",
                        "rolloutParallel": "tp=4",
                    },
                    {"mappingKey": "m.json", "train": "t"},
                    {"mappingKey": "m", "train": "t", "rollout": "r", "step": -1},
                ],
                "tolerances": {"float32": 1e-5, "bfloat16": 0},
                "severity": {"missing-op": "error", "nan-inf": "loud"},
                "outDir": "out",
            }
        }
    )
    assert settings.pairs == (PairSetting("m.json", "t", "r", 3, "tp=2", "tp=4"),)
    assert settings.tolerances.for_dtypes("torch.float32") == 1e-5 and settings.severity == {"missing-op": "error"}
    assert settings.out_dir == "out"
    assert problems == [
        "rcaLsp.pairs[1] needs string fields mappingKey, train and rollout",
        "rcaLsp.pairs[2].step must be a step number (0, 1, ...)",
        "rcaLsp.tolerances.bfloat16: the tolerance for bfloat16 must be a positive number, got 0; ignored",
        "rcaLsp.severity.nan-inf must be one of error, warning, information, hint, off",
    ]
    assert Settings.from_client("nonsense")[1] == ["rcaLsp settings must be an object, got str"]


def test_msprobe_mapping_files_are_mapping_files_paired_as_any_other(tmp_path: Path) -> None:
    """data_mapping*.yaml / cell_mapping*.yml by convention, any YAML file named by an rca-lsp.toml [[pair]]."""
    from rca_lsp.server.pairing import is_mapping_name

    root = workspace(tmp_path)
    assert all(is_mapping_name(Path(n)) for n in ("data_mapping.yaml", "cell_mapping_0728.yml", "cell_mapping.yaml"))
    assert not any(is_mapping_name(Path(n)) for n in ("layer_mapping.yaml", "config.yaml", "mapping.yaml"))
    pair = find_pair(root / "exp" / "cell_mapping.yaml", (), [root])
    assert isinstance(pair, Pair) and pair.source.startswith("convention")
    (root / "exp" / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "ours.yml"\ntrain = "../ranks/train"\nrollout = "rollout"\n'
    )
    pair = find_pair(root / "exp" / "ours.yml", (), [root])
    assert isinstance(pair, Pair) and pair.source.endswith("rca-lsp.toml") and len(pair.train.files) == 2


def test_rollout_step_from_settings_and_config_joins_the_steps(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    shutil.copytree(FIXTURES / "decode_steps_healthy", root / "exp")
    (root / "exp" / "rca-lsp.toml").unlink()
    mapping = root / "exp" / "mapping_key.json"
    unpaired = find_pair(mapping, (), [root])  # by convention: five steps and no choice
    assert isinstance(unpaired, Unpaired) and "--rollout-step all" in (unpaired.problem or "")
    settings, problems = Settings.from_client(
        {"pairs": [{"mappingKey": str(mapping), "train": "t", "rollout": "r", "rolloutStep": "1-3"}]}
    )
    assert problems == [] and settings.pairs[0].rollout_step == "1-3"
    setting = PairSetting(str(mapping), str(root / "exp/train"), str(root / "exp/rollout"), rollout_step="1-3")
    pair = find_pair(mapping, (setting,), [root])
    assert isinstance(pair, Pair) and pair.rollout.joined_steps == (1, 2, 3)
    _, problems = Settings.from_client(
        {"pairs": [{"mappingKey": "m", "train": "t", "rollout": "r", "rolloutStep": -1}]}
    )
    assert problems == ['rcaLsp.pairs[0].rolloutStep must be a step number, "all" or a span "0-4"']
    (root / "exp" / "rca-lsp.toml").write_text(
        '[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "train"\nrollout = "rollout"\nrollout_step = "9-"\n'
    )
    bad = find_pair(mapping, (), [root])
    assert isinstance(bad, Unpaired) and "no step in 9- here" in (bad.problem or "")


def test_a_pairing_glob_is_expanded_without_following_symlinks_and_within_a_bound(tmp_path: Path, monkeypatch) -> None:
    """Issue 23, defect 15: `**` does not descend into symlinked folders (two self-links made glob.glob run for
    ever); a folder named through a symlink is still followed; a glob that visits more entries than the bound is
    reported, naming the glob, instead of walking on."""
    from rca_lsp.server import pairing

    root = workspace(tmp_path)
    exp = root / "exp"
    (exp / "cycle").mkdir()
    for name in ("a", "b"):
        (exp / "cycle" / name).symlink_to(".", target_is_directory=True)
    (root / "linked").symlink_to(root / "ranks", target_is_directory=True)
    config = exp / "rca-lsp.toml"
    config.write_text('[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "**/train"\nrollout = "../link*/rollout"\n')
    pair = find_pair(exp / "mapping_key.json", (), [root])
    assert isinstance(pair, Pair), pair
    assert pair.train.root == (exp / "train").resolve() and pair.rollout.root == (root / "ranks" / "rollout").resolve()
    for index in range(30):
        (exp / "deep" / f"d{index}").mkdir(parents=True)
    monkeypatch.setattr(pairing, "GLOB_ENTRIES", 20)
    unpaired = find_pair(exp / "mapping_key.json", (), [root])
    assert isinstance(unpaired, Unpaired) and unpaired.problem is not None
    assert f"{exp}/**/train" in unpaired.problem and "more than 20 files and folders" in unpaired.problem


@pytest.mark.parametrize(
    "pattern",
    ["**/train", "*/train", "**/rank*/dump.json", "ranks/**", "**/step0", "exp/*/step?", "**/.hidden", "**/[tr]*", "*"],
)
def test_the_bounded_glob_matches_what_glob_matches_without_symlinks(tmp_path: Path, pattern: str) -> None:
    import glob

    from rca_lsp.base.globs import expand

    root = workspace(tmp_path)
    (root / "exp" / ".hidden").mkdir()
    (root / ".hidden").mkdir()
    assert expand(f"{root}/{pattern}", 10**6) == sorted(glob.glob(f"{root}/{pattern}", recursive=True))


def test_rank_files_gone_since_the_last_analysis_are_told_from_a_dump_made_anew(tmp_path: Path) -> None:
    """Issue 23, defect 6: what the server compares a pair with before analysing it again (dump_layout)."""
    from rca_lsp.server.pairing import dump_layout, root_gone

    root = workspace(tmp_path)
    mapping = root / "ranks" / "mapping_key.json"
    first = find_pair(mapping, (), [root])
    assert isinstance(first, Pair) and len(first.train.files) == 2
    layout, gone = dump_layout(None, first)
    assert gone == []
    rank1 = root / "ranks" / "train" / "step0" / "rank1"
    (rank1 / "dump.json").rename(root / "aside.json")  # deleted, as a rewrite does first
    shrunk = find_pair(mapping, (), [root])  # a rank folder without its dump.json is no dump of fewer ranks
    assert isinstance(shrunk, Unpaired) and str(rank1 / "dump.json") in (shrunk.problem or "")
    aside_rank1 = root / "aside_rank1"
    rank1.rename(aside_rank1)  # the whole rank folder moved away: ranks left that pair, told by the layout
    shrunk = find_pair(mapping, (), [root])
    assert isinstance(shrunk, Pair) and dump_layout(layout, shrunk)[1] == [(rank1 / "dump.json").resolve()]
    aside_rank1.rename(rank1)
    (root / "aside.json").rename(rank1 / "dump.json")
    assert dump_layout(layout, find_pair(mapping, (), [root]))[1] == []  # type: ignore[arg-type]
    train = root / "ranks" / "train"
    train.rename(root / "old_train")  # the dump removed: gone as a whole, then made anew with one rank
    assert root_gone(layout)
    shutil.copytree(root / "old_train", train, ignore=shutil.ignore_patterns("rank1"))
    again = find_pair(mapping, (), [root])
    assert isinstance(again, Pair) and len(again.train.files) == 1 and dump_layout(layout, again)[1] == []


@pytest.mark.parametrize("option", ["step = true", "step = false", "rollout_step = true"])
def test_a_boolean_step_in_a_config_file_is_refused_not_read_as_a_number(tmp_path: Path, option: str) -> None:
    """Issue 23, also seen: toml `step = true` was read as step 1 (a bool is an int in Python)."""
    root = workspace(tmp_path)
    (root / "exp" / "rca-lsp.toml").write_text(
        f'[[pair]]\nmapping_key = "mapping_key.json"\ntrain = "train"\nrollout = "rollout"\n{option}\n'
    )
    unpaired = find_pair(root / "exp" / "mapping_key.json", (), [root])
    assert isinstance(unpaired, Unpaired) and "must be a step number" in (unpaired.problem or "")
