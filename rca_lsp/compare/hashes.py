"""md5 summary mode: msprobe's per-tensor CRC32 (field `md5`, 8 hex digits, of the tensor's bytes in memory order;
shape and dtype not hashed). Equal hashes are bitwise-equal tensors; a concatenation along dim 0 has the CRC that
zlib's crc32_combine gives from its parts' (a fused weight against its split parts), an interleaved fusion does
not."""

from __future__ import annotations

import itertools
import math
from typing import Sequence

from rca_lsp.dumps.tensorfile import TensorNode

_BYTES = {"float64": 8, "double": 8, "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}
_BYTES.update({"int64": 8, "long": 8, "int32": 4, "int": 4, "int16": 2, "short": 2, "int8": 1, "uint8": 1, "bool": 1})
_POLYNOMIAL = 0xEDB88320  # CRC-32 (zlib), reflected


def crc_of(node: TensorNode | None) -> int | None:
    text = node.md5 if node is not None else None
    if type(text) is not str:
        return None
    try:
        return int(text, 16)
    except ValueError:
        return None


def byte_size(node: TensorNode) -> int | None:
    size = _BYTES.get(str(node.dtype or "").rpartition(".")[2].lower())
    shape = node.shape
    if size is None or type(shape) is not list or not all(type(d) is int for d in shape):
        return None
    return math.prod(shape) * size


def _times(matrix: Sequence[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _square(matrix: Sequence[int]) -> list[int]:
    return [_times(matrix, row) for row in matrix]


def crc32_combine(first: int, second: int, second_length: int) -> int:
    """The CRC-32 of a + b from crc(a), crc(b) and len(b) (zlib's crc32_combine: b's length in zero bytes applied
    to crc(a) by squaring the one-zero-bit operator)."""
    if second_length <= 0:
        return first
    odd = [_POLYNOMIAL] + [1 << bit for bit in range(31)]  # one zero bit
    even = _square(odd)  # two
    odd = _square(even)  # four
    length = second_length
    while True:
        even = _square(odd)  # one zero byte, then two, four, ...
        if length & 1:
            first = _times(even, first)
        length >>= 1
        if not length:
            break
        odd = _square(even)
        if length & 1:
            first = _times(odd, first)
        length >>= 1
        if not length:
            break
    return first ^ second


def combined_crc(parts: Sequence[TensorNode]) -> int | None:
    """The CRC of the parts concatenated in this order (None when a part lacks its hash or its byte size)."""
    crc: int | None = None
    for part in parts:
        part_crc, size = crc_of(part), byte_size(part)
        if part_crc is None or size is None:
            return None
        crc = part_crc if crc is None else crc32_combine(crc, part_crc, size)
    return crc


def reordered_parts(fused: TensorNode, parts: Sequence[TensorNode], names: Sequence[str]) -> str:
    """When the fused tensor's hash is that of its parts concatenated in another order: that order, described."""
    target = crc_of(fused)
    if target is None or len(parts) > 4:
        return ""
    for order in itertools.permutations(range(len(parts))):
        if list(order) != list(range(len(parts))) and combined_crc([parts[i] for i in order]) == target:
            listed = " | ".join(names[i] for i in order)
            return f"the fused tensor's hash is that of its parts in another order ({listed}): blocks swapped"
    return ""
