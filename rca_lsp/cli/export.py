"""`rca-lsp export-mapping`: a mapping-key file (JSON, or one of msprobe's YAML mappings) written as msprobe's
data_mapping or cell_mapping YAML, resolved against the dumps."""

from __future__ import annotations

import argparse
from pathlib import Path

from rca_lsp.base.atomicfile import remove_stale_temporaries, write_atomically
from rca_lsp.base.errors import InputError
from rca_lsp.cli.source_args import add_dump_arguments, add_source_arguments, side_options
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
    output = Path(args.output)
    if not output.parent.is_dir():  # a mistyped folder is an error, not created
        raise InputError(str(output), f"cannot write the msprobe mapping: no folder {output.parent}")
    parsed = read_mapping_file(args.mapping_key)
    raise_if_unusable(parsed)
    cache = DumpCache()
    train_options, rollout_options = side_options(args)
    train, rollout = cache.get(train_options.resolve(args.train)), cache.get(rollout_options.resolve(args.rollout))
    mapping = parsed.for_dumps(train, rollout)
    exported = export_mapping(args.format, list(mapping.effective().values()), train, rollout)
    try:
        remove_stale_temporaries(output.parent)
        write_atomically(output, exported.text(str(args.mapping_key)).encode())
    except OSError as error:
        raise InputError(str(output), f"cannot write the msprobe mapping: {error.strerror or error}") from None
    print(
        f"wrote {args.format}_mapping {output}: {exported.pairs} module pairs in {len(exported.lines)} lines; "
        f"{len(exported.comments)} entries left as comments (no msprobe equivalent)"
    )
    for comment in exported.comments[:10]:
        print(f"  - {comment}")
    if exported.read_back:
        print(
            f"note: read back against these dumps, {len(exported.read_back)} train modules pair otherwise (see the file's end)"
        )
    return 0
