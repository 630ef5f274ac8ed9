"""Command line: `rca-lsp analyze`, `rca-lsp serve`, `rca-lsp suggest-mapping`, `rca-lsp export-mapping`."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from contextlib import contextmanager
from dataclasses import astuple
from pathlib import Path
from typing import Any, Iterator, NoReturn, Sequence

from rca_lsp import __version__
from rca_lsp.base.digits import is_ascii_digits
from rca_lsp.base.display import shown
from rca_lsp.base.errors import InputError
from rca_lsp.base.forkpart import can_fork
from rca_lsp.cli import export as export_cli
from rca_lsp.cli import suggest as suggest_cli
from rca_lsp.cli.output_file import output_folder
from rca_lsp.cli.progress import Progress
from rca_lsp.cli.source_args import add_dump_arguments, add_source_arguments, side_options, warn_of_ignored_folders
from rca_lsp.diagnose.analysis import Analysis, Compared
from rca_lsp.diagnose.run import SideOptions, analyze_paths, raise_if_unusable
from rca_lsp.dumps.dump import Dump
from rca_lsp.dumps.sources import ParallelLayout
from rca_lsp.dumps.stepjoin import steps_joined
from rca_lsp.model.tolerance import Tolerances, checked_tolerance
from rca_lsp.report.markdown import NOTHING_COMPARED
from rca_lsp.report.outputs import BackgroundTables, check_inputs_spared, write_outputs
from rca_lsp.report.root_cause import confidence_text
from rca_lsp.report.tables.columns import COLUMN_STYLES

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo"  # package data beside the stages: rca_lsp/demo


def _add_analyze(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="root-cause analysis of a train/rollout dump pair",
        description="Compare a train and a rollout msprobe dump through a mapping-key "
        "file and write output_1..output_5. Without arguments: the bundled demo.",
    )
    add_dump_arguments(parser, required=False)  # none: the bundled demo
    parser.add_argument(
        "--mapping-key",
        "--mapping_key",
        dest="mapping_key",
        help="mapping-key JSON, or msprobe's data_mapping / cell_mapping YAML",
    )
    parser.add_argument("--out-dir", default=None, help="output directory (default: ./rca_out)")
    parser.add_argument("--demo", action="store_true", help="run on the bundled demo fixture")
    parser.add_argument(
        "--columns",
        choices=COLUMN_STYLES,
        default="rca",
        help="output_3's column names: ours (default) or msprobe compare's (NPU Name, Max diff, ...)",
    )
    parser.add_argument(
        "--no-chart",
        action="store_true",
        help="skip the divergence chart (output_5's HTML page and image): seconds saved on 10^5-module dumps",
    )
    parser.add_argument(
        "--tolerance",
        action="append",
        default=[],
        metavar="DTYPE=REL",
        help="relative tolerance for a dtype, e.g. bfloat16=0.03 (repeatable)",
    )
    add_source_arguments(parser)


def _tolerances(values: Sequence[str]) -> Tolerances:
    overrides = {}
    for value in values:
        name, _, number = value.partition("=")
        try:
            tolerance = float(number)
        except ValueError:
            raise InputError("--tolerance", f"expected DTYPE=NUMBER, got {value!r}") from None
        try:
            dtype, tolerance = checked_tolerance(name, tolerance)
        except ValueError as error:
            raise InputError("--tolerance", f"{error} (in {value!r})") from None
        overrides[dtype] = tolerance
    return Tolerances.with_overrides(overrides)


def _summary(analysis: Analysis, report: dict[str, Any], out_dir: Path, chart: bool = True) -> str:
    lines = [
        "Root Cause Evidence Summary:",
        f"- output_dir: {out_dir}",
        f"- top_hypothesis: {report['top_hypothesis'] or '(none)'}",
    ]
    if not analysis.records:
        lines.append(f"- {NOTHING_COMPARED}")
    for suspect in analysis.suspects[:5]:
        lines.append(
            f"  - {suspect.classification}: {suspect.train_key}"
            + ("" if suspect.credible_origin else " (follows from an earlier divergence)")
        )
    for summary in report["calibration"].values():
        lines.append(f"- calibration: {summary['summary']}")
    first, stated = report["first_divergence"], confidence_text(report)
    if first is not None and stated is not None:
        alternatives = first["confidence"]["alternatives"]
        lines.append(
            f"- confidence: {stated}"
            + (f"; {len(alternatives)} other credible origin(s)" if alternatives else "; no other credible origin")
        )
    element_wise = report.get("element_wise")
    if element_wise is not None:
        modes = element_wise["modes"]
        lines.append(f"- element-wise: train {modes['train']} mode, rollout {modes['rollout']} mode")
        lines += [f"  - {line}" for line in element_wise["notes"] + element_wise["unreadable_files"][:5]]
        if len(element_wise["unreadable_files"]) > 5:
            lines.append(f"  - ... {len(element_wise['unreadable_files']) - 5} more unreadable tensor files")
    for side, joined in report["joined_steps"].items():
        lines.append(f"- {side}: {steps_joined(joined['steps'])}")
    if report["train_data_group"] is not None:
        lines.append(f"- train data-parallel group: {report['train_data_group']['why']}")
    for side, summary in report["parallel"].items():
        lines.append(f"- {side}: merged {len(summary['ranks'])} ranks ({summary['layout']})")
        lines += [f"  - {note}" for note in summary["notes"][:5]]
    if report["disagreements"]:
        lines.append(f"- disagreements: {len(report['disagreements'])} (copies that should be identical differ)")
        lines += [f"  - {row['side']} {row['key']}: {row['message']}" for row in report["disagreements"][:5]]
    lines += [
        f"- structural_false_positives: {len(report['structural_false_positives'])}",
        f"- root_cause_suspects: {len(report['root_cause_suspects'])}",
        f"- report_json: {out_dir / 'output_5_root_cause_report.json'}",
        f"- report_md: {out_dir / 'output_5_root_cause_report.md'}",
    ]
    if chart:
        lines.append(f"- report_html: {out_dir / 'output_5_root_cause_report.html'} (the divergence chart)")
    return "\n".join(map(shown, lines))  # keys and paths: no line break or bidi control shown as it is


def _warn_of_ignored_ranks(train: SideOptions, rollout: SideOptions, analysis: Analysis) -> None:
    """A rank layout or a rank given for a side whose dump holds one rank cannot apply: said, not an error (the
    server takes one such setting for every pair of a workspace)."""
    given: tuple[tuple[str, str, ParallelLayout | int | None, Dump], ...] = (
        ("--parallel", "train", train.layout, analysis.train),
        ("--train-rank", "train", train.data_rank, analysis.train),
        ("--rollout-parallel", "rollout", rollout.layout, analysis.rollout),
    )
    for flag, side, value, dump in given:
        if value is None or dump.parallel is not None:
            continue
        one_rank = value == 0 if isinstance(value, int) else all(size in (None, 1) for size in astuple(value))
        if not one_rank:
            print(shown(f"warning: {flag} {value} ignored: the {side} dump is one rank ({dump.path})"), file=sys.stderr)


def _warn_of_issues(analysis: Analysis, mapping: Path) -> None:
    for issue in analysis.issues[:10]:
        key = f" (key {issue.key!r})" if issue.key else ""
        print(
            shown(f"warning: {mapping}:{analysis.mapping.line_of(issue.span)}: {issue.code}: {issue.message}{key}"),
            file=sys.stderr,
        )
    if len(analysis.issues) > 10:
        print(f"warning: ... {len(analysis.issues) - 10} more mapping problems (see output_5)", file=sys.stderr)


def run_analyze(args: argparse.Namespace) -> int:
    given = [args.train, args.rollout, args.mapping_key]
    if args.demo or not any(given):
        train, rollout, mapping = DEMO_DIR / "train", DEMO_DIR / "rollout", DEMO_DIR / "mapping_key.json"
        print(f"Running the bundled demo ({DEMO_DIR})")
    elif not all(given):
        missing = [flag for flag, value in zip(("--train", "--rollout", "--mapping-key"), given) if not value]
        raise InputError("analyze", f"missing {', '.join(missing)} (or give none of them to run the demo)")
    else:
        train, rollout, mapping = Path(args.train), Path(args.rollout), Path(args.mapping_key)
    train_options, rollout_options = side_options(args)
    warn_of_ignored_folders(train, train_options)
    warn_of_ignored_folders(rollout, rollout_options)
    progress = Progress()
    out_dir = output_folder("rca_out" if args.out_dir is None else args.out_dir)
    check_inputs_spared(out_dir, [mapping])  # before the analysis, which may take minutes

    def compared(result: Compared) -> None:  # the groups compared: the tables are written from now on
        raise_if_unusable(result.mapping)  # before anything is written
        if can_fork():
            progress.say(f"writing the tables to {out_dir} meanwhile")
            with _output_errors(out_dir):
                tables.start(result)

    with BackgroundTables(out_dir, progress) as tables:
        analysis = analyze_paths(
            train,
            rollout,
            mapping,
            _tolerances(args.tolerance),
            fork=True,
            train_options=train_options,
            rollout_options=rollout_options,
            progress=progress,
            on_compared=compared,
        )
        _warn_of_issues(analysis, mapping)
        _warn_of_ignored_ranks(train_options, rollout_options, analysis)

        def answer(report: dict[str, Any]) -> None:  # printed as soon as output_5 is written, before the rest
            print(_summary(analysis, report, out_dir, not args.no_chart), flush=True)
            if not args.no_chart:
                progress.say(f"drawing the chart in {out_dir}")

        progress.say(f"writing the root-cause report to {out_dir}")
        with _output_errors(out_dir):
            written = write_outputs(
                analysis,
                out_dir,
                fork=True,
                columns=args.columns,
                chart=not args.no_chart,
                on_answer=answer,
                progress=progress,
                tables=tables,
            )
    progress.wrote(written)
    if args.exit_when_done:
        _exit_without_teardown()
    return 0


@contextmanager
def _output_errors(out_dir: Path) -> Iterator[None]:
    """An OSError writing the outputs as one line naming the file, when the error names one (one not a regular
    file, see atomicfile), else the folder."""
    try:
        yield
    except OSError as error:
        where = str(error.filename or out_dir)
        raise InputError(where, f"cannot write the output files: {error.strerror or error}") from None


def _exit_without_teardown() -> NoReturn:
    """End the process now: freeing the analysis' ~10^7 objects one by one took ~2 s on a 160 MB dump pair."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:  # None: started with the descriptor closed (`>&-`), nothing to flush
            stream.flush()
    os._exit(0)


LOG_LEVELS = ("debug", "info", "warning", "error")


def _add_serve(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve", help="run the language server (stdio by default)")
    parser.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the default)")
    parser.add_argument("--tcp", metavar="HOST:PORT", help="listen on a TCP address instead of stdio")
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        # from the environment too: an editor starts the server with no arguments of the user's
        default=os.environ.get("RCA_LSP_LOG_LEVEL", "warning").lower(),
        help="the server's logging on stderr; 'info' logs what each analysis cost (default: $RCA_LSP_LOG_LEVEL, else "
        "warning)",
    )


def run_serve(args: argparse.Namespace) -> int:
    from rca_lsp.server.app import server

    if args.log_level not in LOG_LEVELS:  # argparse checks the choices given, not the default
        raise InputError("RCA_LSP_LOG_LEVEL", f"expected one of {', '.join(LOG_LEVELS)}, got {args.log_level!r}")
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # the server's own lines at the level asked for; pygls's info lines would copy every message (charts of MBs)
    logging.getLogger("rca_lsp").setLevel(args.log_level.upper())
    if args.tcp:
        host, _, port = args.tcp.rpartition(":")
        if not is_ascii_digits(port) or int(port) > 65535:
            raise InputError("--tcp", f"expected HOST:PORT (a port from 0 to 65535), got {args.tcp!r}")
        try:  # an address in use, a host that does not resolve: one line, not asyncio's traceback
            server.start_tcp(host.removeprefix("[").removesuffix("]") or "127.0.0.1", int(port))  # [::1]:2087
        except OSError as error:
            raise InputError("--tcp", f"cannot listen on {args.tcp}: {error.strerror or error}") from None
    else:
        server.start_io()
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rca-lsp", description=__doc__)
    parser.add_argument("--version", action="version", version=f"rca-lsp {__version__}")
    subparsers = parser.add_subparsers(dest="command")
    _add_analyze(subparsers)
    _add_serve(subparsers)
    suggest = subparsers.add_parser("suggest-mapping", help="draft a mapping-key file from two dumps")
    suggest_cli.add_arguments(suggest)
    export = subparsers.add_parser("export-mapping", help="write the mapping as msprobe data/cell mapping YAML")
    export_cli.add_arguments(export)
    return parser


COMMANDS = {
    "analyze": run_analyze,
    "serve": run_serve,
    "suggest-mapping": suggest_cli.run,
    "export-mapping": export_cli.run,
}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    args.exit_when_done = argv is None  # run as the program (not called with arguments, e.g. by a test)
    try:
        return COMMANDS[args.command](args)
    except InputError as error:
        print(f"rca-lsp: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `rca-lsp ... | head`: the reader left, nothing more to say
        sys.stderr.close()
        return 0
