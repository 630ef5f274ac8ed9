"""Command-line options that select one side's logical dump (step, rank layout), shared by every subcommand."""

from __future__ import annotations

import argparse
import os
import sys

from rca_lsp.base.display import shown
from rca_lsp.base.errors import InputError
from rca_lsp.diagnose.run import SideOptions
from rca_lsp.dumps.sources import parse_layout, parse_step, parse_step_number


def add_dump_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--train / --rollout: the two dumps (a dump.json or an msprobe dump directory each)."""
    parser.add_argument("--train", required=required, help="train dump.json or msprobe dump directory")
    parser.add_argument("--rollout", required=required, help="rollout dump.json or msprobe dump directory")


def add_source_arguments(parser: argparse.ArgumentParser) -> None:
    """--step / --parallel: which step of a dump directory, and how its ranks were laid out (both optional)."""
    parser.add_argument(
        "--step",
        default=None,
        metavar="N",
        help="the step<N> folder to analyse when a dump directory holds several",
    )
    parser.add_argument(
        "--rollout-step",
        default=None,
        metavar="N|all|A-B",
        help="the rollout's step (default: --step, when the rollout holds several); `all` or a span such as `0-4` "
        "joins the steps as successive calls (a decoding engine dumped one step per engine step, as msprobe's vLLM "
        "integration does)",
    )
    parser.add_argument(
        "--parallel",
        default=None,
        metavar="tp=N,pp=N,ep=N,dp=N",
        help="the train run's rank layout when the dumps alone cannot tell (default: inferred)",
    )
    parser.add_argument(
        "--train-rank",
        default=None,
        metavar="N",
        help="analyse the train data-parallel group of rank N (default: the group whose model input equals the "
        "rollout's, as the dumps show)",
    )
    parser.add_argument(
        "--rollout-parallel", default=None, metavar="tp=N,...", help="the rollout's rank layout (default: inferred)"
    )


def side_options(args: argparse.Namespace) -> tuple[SideOptions, SideOptions]:
    step = parse_step_number(args.step, "--step") if args.step is not None else None
    rank = parse_step_number(args.train_rank, "--train-rank", "rank") if args.train_rank is not None else None
    train = SideOptions(step, parse_layout(args.parallel, "--parallel"), data_rank=rank)
    rollout = SideOptions(
        parse_step(args.rollout_step, "--rollout-step"),
        parse_layout(args.rollout_parallel, "--rollout-parallel"),
        step,
    )
    return train, rollout


def warn_of_ignored_folders(path: str | os.PathLike[str], options: SideOptions) -> None:
    """`warning: ...` on stderr when the side's dump folder holds a second layout beside the one read (see
    DumpSource.ignored_note). A side that cannot be resolved says nothing here: its load says why."""
    try:
        note = options.resolve(path).ignored_note
    except InputError:
        return
    if note is not None:
        print(shown(f"warning: {note}"), file=sys.stderr)
