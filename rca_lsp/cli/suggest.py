"""`rca-lsp suggest-mapping`: draft a mapping-key file from a train and a rollout dump, and print its coverage."""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from pathlib import Path

import orjson

from rca_lsp.base.atomicfile import FileStamp, TargetChanged, same_file
from rca_lsp.base.errors import InputError
from rca_lsp.cli.output_file import output_target, through_symlink, write_output
from rca_lsp.cli.source_args import add_dump_arguments, add_source_arguments, side_options, warn_of_ignored_folders
from rca_lsp.diagnose.run import raise_if_unusable, read_mapping_file, with_data_group
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.model import MSPROBE_SUFFIXES
from rca_lsp.suggest import suggest_mapping
from rca_lsp.suggest.coverage import render_coverage
from rca_lsp.suggest.result import MappingValue
from rca_lsp.suggest.rules import NamingRules


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Propose train -> rollout module pairs from names, order, shapes and statistics, write "
        "the confident ones as a mapping-key file (train dump order) and print the coverage; "
        "low-confidence pairs are listed, not written."
    )
    add_dump_arguments(parser)
    parser.add_argument("-o", "--output", required=True, help="mapping-key file to write")
    parser.add_argument(
        "--existing",
        help="mapping-key file (or msprobe data/cell mapping YAML) whose entries are kept; only missing ones are proposed",
    )
    parser.add_argument(
        "--rules",
        action="append",
        default=[],
        metavar="TOML",
        help="extra naming rules, tried before the built-in ones (repeatable)",
    )
    add_source_arguments(parser)


def run(args: argparse.Namespace) -> int:
    if args.output.lower().endswith(MSPROBE_SUFFIXES):
        raise InputError(
            args.output,
            "suggest-mapping writes a mapping-key JSON; rca-lsp export-mapping writes it as msprobe YAML",
        )
    target = output_target(args.output, WHAT)
    rules = NamingRules.from_files(args.rules) if args.rules else None
    cache = DumpCache()
    train_options, rollout_options = side_options(args)
    warn_of_ignored_folders(args.train, train_options)
    warn_of_ignored_folders(args.rollout, rollout_options)
    train_source = train_options.resolve(args.train)
    train, rollout = cache.get(train_source), cache.get(rollout_options.resolve(args.rollout))
    # the statistics evidence compares the train group that read the rollout's data
    train, choice = with_data_group(cache, train_source, train, rollout)
    # the file kept is the one replaced: its stamp, taken before reading it, tells an edit saved meanwhile
    stamp = FileStamp.of(target) if args.existing and same_file(args.existing, target) else None
    existing = read_existing(args.existing, train, rollout) if args.existing else None
    result = suggest_mapping(train, rollout, existing, rules)
    written = write_mapping(args.output, result.mapping, stamp)
    if choice is not None:
        print(f"train data-parallel group: {choice.describe()}")
    print(render_coverage(result), end="")
    if written != target:
        print(
            f"warning: {args.output} changed while suggest-mapping ran (an edit saved meanwhile): left as it is; "
            f"the suggestion went beside it, to {written}",
            file=sys.stderr,
        )
    shown = through_symlink(args.output, target) if written == target else str(written)
    print(f"wrote {len(result.mapping)} entries to {shown}")
    return 0


WHAT = "mapping-key file"


def read_existing(path: str, train: Dump, rollout: Dump) -> dict[str, MappingValue]:
    """The entries of a mapping-key file (msprobe's YAML mappings resolved against the dumps)."""
    parsed = read_mapping_file(path)
    raise_if_unusable(parsed)
    return parsed.for_dumps(train, rollout).as_dict()


def write_mapping(
    path: str | os.PathLike[str], mapping: dict[str, MappingValue], stamp: FileStamp | None = None
) -> Path:
    """Write the mapping to `path` atomically; the file written: `path`'s (a symlink's target, see output_target),
    or when that no longer has `stamp` (the stamp it had when read), a new file beside it (`<name>.suggested.json`,
    `.suggested-2.json`, ...), so no edit is lost."""
    given = os.fspath(path)
    target = output_target(given, WHAT)
    data = orjson.dumps(mapping, option=orjson.OPT_INDENT_2) + b"\n"
    try:
        write_output(given, data, WHAT, stamp)
        return target
    except TargetChanged:
        names = (f"{target.stem}.suggested{f'-{n}' if n > 1 else ''}{target.suffix}" for n in itertools.count(1))
        beside = next(target.with_name(name) for name in names if not os.path.lexists(target.with_name(name)))
        write_output(str(beside), data, WHAT)
        return beside
