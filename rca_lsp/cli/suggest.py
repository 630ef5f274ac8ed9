"""`rca-lsp suggest-mapping`: draft a mapping-key file from a train and a rollout dump, and print its coverage."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import orjson

from rca_lsp.base.atomicfile import remove_stale_temporaries, write_atomically
from rca_lsp.base.errors import InputError
from rca_lsp.cli.source_args import add_dump_arguments, add_source_arguments, side_options
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
    try:
        if args.output.lower().endswith(MSPROBE_SUFFIXES):
            raise InputError(
                args.output,
                "suggest-mapping writes a mapping-key JSON; rca-lsp export-mapping writes it as msprobe YAML",
            )
        rules = NamingRules.from_files(args.rules) if args.rules else None
        cache = DumpCache()
        train_options, rollout_options = side_options(args)
        train_source = train_options.resolve(args.train)
        train, rollout = cache.get(train_source), cache.get(rollout_options.resolve(args.rollout))
        # the statistics evidence compares the train group that read the rollout's data
        train, choice = with_data_group(cache, train_source, train, rollout)
        existing = read_existing(args.existing, train, rollout) if args.existing else None
        result = suggest_mapping(train, rollout, existing, rules)
        write_mapping(Path(args.output), result.mapping)
    except InputError as error:
        print(str(error), file=sys.stderr)
        return 2
    if choice is not None:
        print(f"train data-parallel group: {choice.describe()}")
    print(render_coverage(result), end="")
    print(f"wrote {len(result.mapping)} entries to {args.output}")
    return 0


def read_existing(path: str, train: Dump, rollout: Dump) -> dict[str, MappingValue]:
    """The entries of a mapping-key file (msprobe's YAML mappings resolved against the dumps)."""
    parsed = read_mapping_file(path)
    raise_if_unusable(parsed)
    return parsed.for_dumps(train, rollout).as_dict()


def write_mapping(path: Path, mapping: dict[str, MappingValue]) -> None:
    """Write atomically (see atomicfile), after removing the temporaries killed runs left beside it."""
    if not path.parent.is_dir():  # a mistyped folder is an error, not created
        raise InputError(str(path), f"cannot write mapping-key file: no folder {path.parent}")
    try:
        remove_stale_temporaries(path.parent)
        write_atomically(path, orjson.dumps(mapping, option=orjson.OPT_INDENT_2) + b"\n")
    except OSError as error:
        raise InputError(str(path), f"cannot write mapping-key file: {error.strerror or error}") from None
