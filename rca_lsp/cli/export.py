"""`rca-lsp export-mapping`: a mapping-key file (JSON, or one of msprobe's YAML mappings) written as msprobe's
data_mapping or cell_mapping YAML, resolved against the dumps."""

from __future__ import annotations

import argparse

from rca_lsp.base.atomicfile import same_file
from rca_lsp.base.display import shown
from rca_lsp.base.errors import InputError
from rca_lsp.cli.output_file import output_target, through_symlink, write_output
from rca_lsp.cli.source_args import add_dump_arguments, add_source_arguments, side_options, warn_of_ignored_folders
from rca_lsp.diagnose.run import raise_if_unusable, read_mapping_file
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.export import FORMATS, export_mapping


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Write the mapping as msprobe's data_mapping YAML (tensor to tensor, msprobe compare -dm) or cell_mapping "
        "YAML (module to module, -cm), train on the left (-tp), rollout on the right (-gp). Groups msprobe cannot "
        "express (1:N, N:1, keys not in the dumps) are written as comments naming them."
    )
    add_dump_arguments(parser)
    parser.add_argument(
        "--mapping-key", "--mapping_key", dest="mapping_key", required=True, help="mapping-key JSON or msprobe YAML"
    )
    parser.add_argument("--format", choices=FORMATS, default="data", help="data_mapping (default) or cell_mapping")
    parser.add_argument("-o", "--output", required=True, help="the YAML file to write")
    add_source_arguments(parser)


def run(args: argparse.Namespace) -> int:
    what = "the msprobe mapping"
    target = output_target(args.output, what)
    if same_file(args.mapping_key, target):
        raise InputError(
            args.output, f"cannot write {what}: the mapping-key file read (--mapping-key) would be lost; name another"
        )
    parsed = read_mapping_file(args.mapping_key)
    raise_if_unusable(parsed)
    cache = DumpCache()
    train_options, rollout_options = side_options(args)
    warn_of_ignored_folders(args.train, train_options)
    warn_of_ignored_folders(args.rollout, rollout_options)
    train, rollout = cache.get(train_options.resolve(args.train)), cache.get(rollout_options.resolve(args.rollout))
    mapping = parsed.for_dumps(train, rollout)
    exported = export_mapping(args.format, list(mapping.effective().values()), train, rollout)
    write_output(args.output, exported.text(str(args.mapping_key)).encode(), what)
    print(
        f"wrote {args.format}_mapping {through_symlink(args.output, target)}: {exported.pairs} module pairs in {len(exported.lines)} lines; "
        f"{len(exported.comments)} entries left as comments (no msprobe equivalent)"
    )
    for comment in exported.comments[:10]:
        print(f"  - {shown(comment)}")
    if exported.read_back:
        print(
            f"note: read back against these dumps, {len(exported.read_back)} train modules pair otherwise (see the file's end)"
        )
    return 0
