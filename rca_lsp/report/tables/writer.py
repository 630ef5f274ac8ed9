"""A table written as `<stem>.json` ({"meta", container: [row objects]}) and `<stem>.csv`, chunk by chunk: rows in,
bytes out (JSON objects by msgspec from a Struct per column set, CSV through cells.csv_body)."""

from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

import msgspec
import orjson

from rca_lsp.base.atomicfile import atomic_stream
from rca_lsp.report.tables.cells import csv_body, json_spelling

Meta = dict[str, Any]  # the "meta" of the JSON tables: tool, version, run id, inputs

CHUNK = 5000  # rows serialised at a time: tables stream to disk instead of living in memory whole


def write_table(
    out_dir: Path,
    stem: str,
    meta: dict[str, Any],
    container: str,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    list_columns: Sequence[int],
) -> list[Path]:
    """`<stem>.json` ({"meta", container: [row objects]}) and `<stem>.csv`, streamed chunk by chunk."""
    json_path, csv_path = out_dir / f"{stem}.json", out_dir / f"{stem}.csv"
    json_head, csv_head = table_heads(meta, container, columns)
    iterator = iter(rows)
    with atomic_stream(json_path) as json_out, atomic_stream(csv_path) as csv_out:
        json_out.write(json_head)
        csv_out.write(csv_head)
        for index in itertools.count():
            chunk = list(itertools.islice(iterator, CHUNK))
            if not chunk:
                break
            json_text, csv_text = encode_chunk(index, chunk, columns, list_columns)
            json_out.write(json_text)
            csv_out.write(csv_text)
        json_out.write(JSON_TAIL)
    return [json_path, csv_path]


JSON_TAIL = b"]}\n"  # closes what table_heads opened


def table_heads(meta: dict[str, Any], container: str, columns: Sequence[str]) -> tuple[bytes, bytes]:
    """The JSON table's opening (its meta and the container key) and the CSV header line."""
    return b'{"meta":' + orjson.dumps(meta) + b',"' + container.encode() + b'":[', ",".join(columns).encode() + b"\n"


def encode_chunk(
    index: int, rows: Sequence[Sequence[Any]], columns: Sequence[str], list_columns: Sequence[int]
) -> tuple[bytes, bytes]:
    """The JSON (row objects, comma-led after the first chunk) and CSV text of one chunk of a table."""
    row_type = _row_type(tuple(columns))
    json_text = _ROW_ENCODER.encode([row_type(*row) for row in rows])[1:-1]
    return (b"," + json_text if index else json_text), csv_body(rows, list_columns, json_text.count(b'":null'))


_ROW_ENCODER = msgspec.json.Encoder(enc_hook=json_spelling)


@lru_cache(maxsize=None)
def _row_type(columns: tuple[str, ...]) -> type[msgspec.Struct]:
    """A row as a Struct whose fields are the columns: msgspec writes it as a JSON object in C, 2.5x faster than
    building a dict per row for orjson."""
    fields = [f"column_{index}" for index in range(len(columns))]  # identifiers; written under the column names
    return msgspec.defstruct("Row", [(f, Any) for f in fields], rename=dict(zip(fields, columns)), gc=False)
