"""Work stops when its caller says so: the flag registry and the long-running functions that poll it."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES
from lsprotocol import types
from pygls.workspace import PositionCodec

from rca_lsp.base.cancel import Cancelled
from rca_lsp.dumps.load import DumpCache
from rca_lsp.mapping.parse import parse_mapping
from rca_lsp.server.cancellation import Cancellations
from rca_lsp.server.features.navigation import document_symbols
from rca_lsp.server.positions import Positions
from rca_lsp.suggest import Matcher


def test_a_cancelled_request_flag_is_raised_and_forgotten_after() -> None:
    cancellations = Cancellations()
    with cancellations.track(7) as should_stop, cancellations.track(8) as other:
        assert not should_stop()
        cancellations.cancel(7)
        cancellations.cancel(99)  # not running: ignored
        assert should_stop() and not other()
    cancellations.cancel(8)  # finished: nothing to stop
    assert not other()
    with cancellations.track(None) as without_id:
        assert not without_id()


def test_suggestion_stops() -> None:
    dumps = DumpCache()
    train = dumps.get(FIXTURES / "missing_activation" / "train")
    rollout = dumps.get(FIXTURES / "missing_activation" / "rollout")
    matcher = Matcher(train, rollout)
    with pytest.raises(Cancelled):
        matcher.suggest(None, lambda: True)
    assert matcher.suggest(None, lambda: False).mapping


def test_symbols_stop() -> None:
    text = (FIXTURES / "missing_activation" / "mapping_key.json").read_text()
    parsed = parse_mapping("m.json", text)
    positions = Positions(parsed, PositionCodec(types.PositionEncodingKind.Utf16))
    with pytest.raises(Cancelled):
        document_symbols(parsed, positions, lambda: True)
    symbols = document_symbols(parsed, positions)
    assert sum(len(s.children or []) for s in symbols) == len(json.loads(text))


def test_the_servers_protocol_raises_the_flag_of_a_cancelled_request() -> None:
    from rca_lsp.server.app import RcaServer

    server = RcaServer()
    protocol = server.protocol
    with protocol.cancellations.track("request-1") as should_stop:  # type: ignore[attr-defined]
        protocol._handle_cancel_notification("request-1")  # what pygls calls on $/cancelRequest
        assert should_stop()


def test_writing_the_outputs_stops_and_leaves_no_partial_file(tmp_path) -> None:
    from rca_lsp.diagnose.run import analyze_paths
    from rca_lsp.report.outputs import write_outputs

    variant = FIXTURES / "missing_activation"
    analysis = analyze_paths(variant / "train", variant / "rollout", variant / "mapping_key.json")
    calls = []

    def stop_at_the_value_compare() -> bool:  # the second part written is output_3
        calls.append(1)
        return len(calls) > 2

    with pytest.raises(Cancelled):
        write_outputs(analysis, tmp_path, should_stop=stop_at_the_value_compare)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [  # the answer (output_5's report) is written first, then the tables in order
        "output_1_key_mapping.csv",
        "output_1_key_mapping.json",
        "output_2_mapping.csv",
        "output_2_mapping.json",
        "output_5_root_cause_report.json",
        "output_5_root_cause_report.md",
    ]
