"""Which train and rollout dumps belong to a mapping-key file: settings, then rca-lsp.toml, then convention."""

from __future__ import annotations

import fnmatch
import glob
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

from rca_lsp.base.errors import InputError
from rca_lsp.base.globs import expand
from rca_lsp.dumps.sources import DumpSource, is_step_number, parse_layout, parse_step, resolve_dump_source
from rca_lsp.mapping.model import MSPROBE_SUFFIXES
from rca_lsp.server.settings import PairSetting

CONFIG_NAME = "rca-lsp.toml"
GLOB_ENTRIES = 200_000  # directory entries a pair's glob may visit (about a second of listing) before it is refused
# mapping-key JSON, and msprobe's mapping files under the names its documentation and msagent give them
MAPPING_GLOBS = (
    "*mapping_key*.json",
    "output_0_key_mapping.json",
    *(f"{name}*{suffix}" for name in ("data_mapping", "cell_mapping") for suffix in MSPROBE_SUFFIXES),
)
CONFIG_SKELETON = """# rca-lsp: which dumps belong to which mapping-key file (paths relative to this file).
[[pair]]
mapping_key = "{mapping}"
train = "train"      # a dump.json or an msprobe dump directory (step*/rank*/dump.json; all ranks are merged)
rollout = "rollout"
# step = 0              # which step<N> folder, when the directories hold several
# parallel = "tp=2"     # the train rank layout, when the dumps alone cannot tell (also rollout_parallel)
# train_rank = 1        # compare the train data-parallel group of this rank (default: the one that read the
#                       # rollout's data, told by the model input)
"""


@dataclass(frozen=True)
class Pair:
    mapping: Path
    train: DumpSource
    rollout: DumpSource
    source: str  # where the pairing came from, for messages

    def files(self) -> tuple[Path, ...]:
        """Every dump file the analysis reads (each rank's)."""
        return self.train.files + self.rollout.files

    def roots(self) -> tuple[Path, ...]:
        """What the pair names on each side (resolved): a dump.json, or the dump folder its files are found in."""
        return self.train.root, self.rollout.root


@dataclass(frozen=True)
class DumpLayout:
    """The dump files an analysis read, and the identity (device, inode) of the roots it found them in."""

    pair: Pair
    identities: tuple[tuple[int, int] | None, ...]


def dump_layout(previous: DumpLayout | None, pair: Pair) -> tuple[DumpLayout, list[Path]]:
    """The pair's layout now, and the files of an earlier analysis of the same dump roots that the pair no longer
    holds because they are no longer there (deleted, as a rewrite does first; a rank or step folder moved away).
    Not files the pair leaves out by choice (another step), nor those of other roots or of a root put anew in the
    place of the earlier one (a dump folder removed and written again, with fewer ranks)."""
    layout = DumpLayout(pair, tuple(_identity(root) for root in pair.roots()))
    if previous is None or previous.pair.roots() != pair.roots() or previous.identities != layout.identities:
        return layout, []
    now = set(pair.files())
    return layout, [path for path in previous.pair.files() if path not in now and not path.is_file()]


def vanished_error(gone: list[Path]) -> InputError:
    """What files of the last good analysis that are gone (see dump_layout) say."""
    more = f" (and {len(gone) - 1} more)" if len(gone) > 1 else ""
    return InputError(
        str(gone[0]),
        f"read by the last good analysis, is gone{more}: being rewritten, or its folder moved away? (a run of fewer "
        "ranks is analysed once its dump folder is made anew or the pairing is saved)",
    )


def root_gone(layout: DumpLayout) -> bool:
    """Whether a root of the layout no longer exists: the dump was removed, and what is written in its place is a
    new dump, analysed as it is."""
    return any(_identity(root) is None for root in layout.pair.roots())


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


@dataclass(frozen=True)
class Unpaired:
    mapping: Path
    looked_for: tuple[str, ...]
    problem: str | None = None  # a configured pair that points at something unusable


def is_mapping_name(path: Path) -> bool:
    return any(fnmatch.fnmatch(path.name, pattern) for pattern in MAPPING_GLOBS)


def _expand(value: str, folder: Path | None, base: Path) -> str:
    if folder is not None:
        value = value.replace("${workspaceFolder}", str(folder))
    expanded = Path(value).expanduser()
    return str(expanded if expanded.is_absolute() else base / expanded)


def _first_match(pattern: str) -> Path | None:
    """The path a pair names: itself, or the first match of its glob (an InputError for a glob that visits more than
    GLOB_ENTRIES files and folders; `**` does not follow symlinks to folders, see base/globs)."""
    if not glob.has_magic(pattern):
        return Path(pattern)
    matches = expand(pattern, GLOB_ENTRIES)
    return Path(matches[0]) if matches else None


@dataclass(frozen=True)
class SourceOptions:
    step: int | None = None
    parallel: str | None = None  # train layout text
    rollout_parallel: str | None = None
    rollout_step: int | str | None = None  # a step, `all` or a span `A-B` (joined as calls); default: step
    train_rank: int | None = None  # the train data-parallel group analysed is this rank's (default: by data)


def _dump_pair(
    mapping: Path, train: str, rollout: str, source: str, options: SourceOptions = SourceOptions()
) -> Pair | Unpaired:
    try:
        found = [_first_match(train), _first_match(rollout)]
        if None in found:
            return Unpaired(mapping, (source,), f"{source}: no file matches {train if found[0] is None else rollout}")
        layouts = (
            parse_layout(options.parallel, f"{source}: parallel"),
            parse_layout(options.rollout_parallel, f"{source}: rollout_parallel"),
        )
        rollout_step = options.step if options.rollout_step is None else options.rollout_step
        steps = (options.step, parse_step(rollout_step, f"{source}: rollout_step"))
        resolved = [
            resolve_dump_source(p, step, layout)  # type: ignore[arg-type]
            for p, step, layout in zip(found, steps, layouts)
        ]
    except InputError as error:
        return Unpaired(mapping, (source,), f"{source}: {error}")
    if options.train_rank is not None:
        resolved[0] = replace(resolved[0], data_rank=options.train_rank)
    return Pair(mapping, resolved[0], resolved[1], source)


def _from_settings(mapping: Path, pairs: Sequence[PairSetting], folders: Sequence[Path]) -> Pair | Unpaired | None:
    for pair in pairs:
        for folder in folders or [None]:  # type: ignore[list-item]
            base = folder or mapping.parent
            pattern = _expand(pair.mapping_key, folder, base)
            if Path(pattern).resolve() == mapping or fnmatch.fnmatch(str(mapping), pattern):
                return _dump_pair(
                    mapping,
                    _expand(pair.train, folder, base),
                    _expand(pair.rollout, folder, base),
                    "settings rcaLsp.pairs",
                    SourceOptions(pair.step, pair.parallel, pair.rollout_parallel, pair.rollout_step, pair.train_rank),
                )
    return None


def _from_config(mapping: Path, stop_at: Path | None) -> Pair | Unpaired | None:
    for folder in [mapping.parent, *mapping.parent.parents]:
        config = folder / CONFIG_NAME
        if config.is_file():
            try:
                document = tomllib.loads(config.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as error:
                return Unpaired(mapping, (str(config),), f"{config}: {error}")
            for index, item in enumerate(document.get("pair") or []):
                if not isinstance(item, dict) or not all(
                    isinstance(item.get(k), str) for k in ("mapping_key", "train", "rollout")
                ):
                    return Unpaired(
                        mapping, (str(config),), f"{config}: [[pair]] #{index + 1} needs mapping_key, train, rollout"
                    )
                options = _config_options(item)
                if isinstance(options, str):
                    return Unpaired(mapping, (str(config),), f"{config}: [[pair]] #{index + 1}: {options}")
                pattern = _expand(item["mapping_key"], None, folder)
                if Path(pattern).resolve() == mapping or fnmatch.fnmatch(str(mapping), pattern):
                    return _dump_pair(
                        mapping,
                        _expand(item["train"], None, folder),
                        _expand(item["rollout"], None, folder),
                        str(config),
                        options,
                    )
        if stop_at is not None and folder == stop_at:
            break
    return None


def _config_options(item: dict[str, object]) -> SourceOptions | str:
    """A [[pair]]'s step / parallel / rollout_parallel / rollout_step, or what is wrong with them."""
    step, parallel, rollout_parallel = item.get("step"), item.get("parallel"), item.get("rollout_parallel")
    rollout_step, train_rank = item.get("rollout_step"), item.get("train_rank")
    if step is not None and not is_step_number(step):
        return "step must be a step number (0, 1, ...)"
    if train_rank is not None and not is_step_number(train_rank):
        return "train_rank must be a rank number (0, 1, ...)"
    if rollout_step is not None and not (isinstance(rollout_step, str) or is_step_number(rollout_step)):
        return 'rollout_step must be a step number, "all" or a span such as "0-4"'
    if any(value is not None and not isinstance(value, str) for value in (parallel, rollout_parallel)):
        return 'parallel must be text such as "tp=2,pp=2"'
    return SourceOptions(step, parallel, rollout_parallel, rollout_step, train_rank)  # type: ignore[arg-type]


def _by_convention(mapping: Path) -> Pair | Unpaired | None:
    folder = mapping.parent
    if not (folder / "train").is_dir() or not (folder / "rollout").is_dir():
        return None
    return _dump_pair(
        mapping, str(folder / "train"), str(folder / "rollout"), "convention (train/ and rollout/ folders)"
    )


def find_pair(mapping: Path, settings_pairs: Sequence[PairSetting], folders: Sequence[Path]) -> Pair | Unpaired:
    mapping = mapping.resolve()
    root = next((f for f in folders if mapping.is_relative_to(f)), None)
    for attempt in (
        lambda: _from_settings(mapping, settings_pairs, folders),
        lambda: _from_config(mapping, root),
        lambda: _by_convention(mapping),
    ):
        found = attempt()
        if found is not None:
            return found
    return Unpaired(
        mapping,
        (
            "a matching entry in the rcaLsp.pairs setting",
            f"an {CONFIG_NAME} with a [[pair]] for this file in its folder or a parent",
            "folders train/ and rollout/ next to this file, each with one dump.json",
        ),
    )


def config_skeleton(mapping: Path) -> str:
    return CONFIG_SKELETON.format(mapping=mapping.name)
