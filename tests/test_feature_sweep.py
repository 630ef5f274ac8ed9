"""The server's features on a mapping being edited: the text changed (any cut and insertion, finished or not), the
analysis still the last good one, as the server keeps it. Findings, quick fixes, hovers, definitions, completions and
symbols answer at every position of the edited text, or answer nothing: never an exception. And the same features,
and the chart, on any run test_generated_runs draws (statistics of every kind, odd shapes and dtypes)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path
from typing import Any

from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lsprotocol import types
from pygls.workspace import PositionCodec
from test_generated_runs import run, write_documents

from rca_lsp.base.errors import InputError
from rca_lsp.compare.records import Comparator
from rca_lsp.diagnose.analysis import Analysis, analyze
from rca_lsp.diagnose.run import analyze_paths
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.model import ParsedMapping, Span
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.model.tolerance import Tolerances
from rca_lsp.server.diagnostics import FindingBuilder, KindCap, issue_diagnostics, severity_resolver
from rca_lsp.server.features.actions import ActionContext, code_actions
from rca_lsp.server.features.chart import encoded_chart
from rca_lsp.server.features.completion import complete
from rca_lsp.server.features.hover import hover_markdown
from rca_lsp.server.features.navigation import definition, document_symbols
from rca_lsp.server.matching import MatcherCache
from rca_lsp.server.positions import Positions
from rca_lsp.server.settings import Settings

VARIANTS = ["missing_activation", "param_desync", "decode_missing_activation", "repeated_calls"]
DUMPS = DumpCache()
MATCHERS = MatcherCache()
URI = "file:///work/mapping_key.json"


@functools.lru_cache(maxsize=None)
def _analysed(variant: str) -> tuple[ParsedMapping, Analysis]:
    path = FIXTURES / variant / "mapping_key.json"
    parsed = parse_mapping(str(path), path.read_text())
    comparator = Comparator(
        DUMPS.get(FIXTURES / variant / "train"), DUMPS.get(FIXTURES / variant / "rollout"), Tolerances()
    )
    return parsed, analyze(parsed, comparator)


# what an engineer types or leaves half-typed: quotes, brackets, separators, key fragments, other scripts
_typed = st.lists(
    st.sampled_from(['"', "[", "]", "{", "}", ",", ":", " ", "\n", "\r", "\\", ".", "*", "0", "9", "²", "é", "\u2028"])
    | st.sampled_from(["Module.", "forward.", "forward.*", "layers.", "mlp", "null", "true"]),
    max_size=6,
).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VARIANTS), st.floats(0, 1), st.integers(0, 40), _typed, st.sampled_from(["utf-16", "utf-32"]))
def test_every_feature_answers_anywhere_in_an_edited_mapping_over_the_last_good_analysis(
    variant: str, at: float, removed: int, inserted: str, encoding: str
) -> None:
    original, analysis = _analysed(variant)
    cut = int(at * len(original.text))
    text = original.text[:cut] + inserted + original.text[cut + removed :]
    parsed = parse_mapping(original.path, text, original)
    positions = Positions(parsed, PositionCodec(types.PositionEncodingKind(encoding)))
    _fixes_and_symbols(analysis, parsed, positions)

    def to_range(start: int, end: int) -> types.Range:
        return types.Range(start=positions.position(start), end=positions.position(end))

    for offset in range(0, len(text) + 1, max(1, len(text) // 400)):
        position = positions.position(offset)
        assert positions.offset(position) <= len(text)
        hit = parsed.entry_at(offset)
        if hit is not None:
            entry, index = hit
            hover_markdown(analysis, entry.train_key, index)
            definition(analysis, entry.train_key, entry.rollout_keys[index] if index is not None else None)
        complete(analysis, parsed, offset, MATCHERS, to_range)


def _fixes_and_symbols(analysis: Analysis, parsed: ParsedMapping, positions: Positions) -> None:
    """Every finding and issue published for the text, each quick fix for them, and the document's symbols."""
    severity = severity_resolver(Settings())
    diagnostics = issue_diagnostics(parsed.issues, positions, severity, KindCap(50))
    diagnostics += FindingBuilder(analysis, parsed, positions, URI, severity).all(500, {}, KindCap(50))
    context = ActionContext(URI, 2, parsed, positions, analysis, MATCHERS)
    for action in code_actions(context, diagnostics):
        assert action.title and (action.edit is not None or action.command is not None)
    document_symbols(parsed, positions, lambda: False)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(run())
def test_every_feature_and_the_chart_answer_on_any_generated_run(
    generated: tuple[dict[str, Any], dict[str, Any], dict[str, Any]],
) -> None:
    train, rollout, mapping = generated
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        documents = {"train/step0/rank0/dump.json": train, "rollout/step0/rank0/dump.json": rollout}
        write_documents(folder, documents, mapping)
        try:
            analysis = analyze_paths(folder / "train", folder / "rollout", folder / "mapping_key.json")
        except InputError:  # refused with its message (test_generated_runs)
            return
    parsed = analysis.mapping
    positions = Positions(parsed, PositionCodec(types.PositionEncodingKind.Utf16))
    _fixes_and_symbols(analysis, parsed, positions)
    for entry in parsed.entries:
        for index in (None, *range(len(entry.rollout_keys))):
            assert hover_markdown(analysis, entry.train_key, index)
            definition(analysis, entry.train_key, entry.rollout_keys[index] if index is not None else None)
    for offset in range(len(parsed.text) + 1):
        complete(analysis, parsed, offset, MATCHERS, lambda start, end: positions.range(Span(start, end)))
    assert encoded_chart(analysis)
