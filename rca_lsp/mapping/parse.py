"""A mapping file parsed by its format: msprobe's data_mapping / cell_mapping YAML, else the mapping-key JSON."""

from __future__ import annotations

from rca_lsp.base.gcpause import paused_gc
from rca_lsp.mapping.jsonfile import parse_json_mapping
from rca_lsp.mapping.model import MSPROBE_SUFFIXES, ParsedMapping
from rca_lsp.mapping.msprobe_yaml import parse_msprobe_mapping


def parse_mapping(path: str, text: str, previous: ParsedMapping | None = None) -> ParsedMapping:
    """Entries with positions plus the issues visible without the dumps: syntax, value shape, duplicates.
    With `previous` (a parse of an earlier version of the same JSON file), entries outside the edited region are
    reused. A .yaml/.yml file is one of msprobe's mapping files (see msprobe_yaml)."""
    if path.lower().endswith(MSPROBE_SUFFIXES):
        return parse_msprobe_mapping(path, text)
    with paused_gc():
        return parse_json_mapping(path, text, previous)
