"""report.significant rounds as Python's text round trip does, to the bit, wherever it says it is sure, and is sure
for nearly all the values dumps hold (so the chart's fast path is the one taken)."""

from __future__ import annotations

import numpy as np
import pytest

from rca_lsp.report.significant import significant


def _python(values: np.ndarray, digits: int) -> np.ndarray:
    return np.array([float(f"{v:.{digits}g}") for v in values.tolist()])


def _bfloat16(values: np.ndarray) -> np.ndarray:
    bits = values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32).astype(np.float64)


_RNG = np.random.default_rng(7)
_SCALED = _RNG.standard_normal(200_000) * 10.0 ** _RNG.integers(-12, 12, 200_000)
SAMPLES = {
    "float64": _SCALED,
    "float32": _SCALED.astype(np.float32).astype(np.float64),
    "float16": _RNG.standard_normal(200_000).astype(np.float16).astype(np.float64),
    "bfloat16": _bfloat16(_SCALED),  # few mantissa bits: exact halves at 4-5 digits are common
    "integers": _RNG.integers(-(10**12), 10**12, 200_000).astype(np.float64),
}


@pytest.mark.parametrize("digits", [4, 5])
@pytest.mark.parametrize("kind", sorted(SAMPLES))
def test_same_doubles_as_the_text_round_trip(kind: str, digits: int) -> None:
    values = SAMPLES[kind]
    rounded, exact = significant(values, digits)
    expected = _python(values, digits)
    assert exact.mean() > 0.99, f"{kind}: the array path should cover nearly every value"
    wrong = exact & ((rounded != expected) | (np.signbit(rounded) != np.signbit(expected)))
    assert not wrong.any(), f"{kind}: {values[wrong][:5]} -> {rounded[wrong][:5]}, Python {expected[wrong][:5]}"


@pytest.mark.parametrize("digits", [4, 5])
def test_edges_are_exact_or_left_to_the_string_path(digits: int) -> None:
    powers = 10.0 ** np.arange(-30, 30)
    values = np.concatenate(
        [
            powers,
            -powers,
            np.nextafter(powers, 0),
            np.nextafter(powers, np.inf),
            powers * (1 - 5 * 10.0**-digits),  # rounds up to the next power of ten
            [0.0, -0.0, 5e-324, 1e300, -1e300, 12345.5, 2.5, 0.125, -3.65625],
        ]
    )
    rounded, exact = significant(values, digits)
    expected = _python(values, digits)
    wrong = exact & ((rounded != expected) | (np.signbit(rounded) != np.signbit(expected)))
    assert not wrong.any(), values[wrong]
    assert exact[values == 0].all() and np.signbit(rounded[values == 0]).tolist() == [False, True]


def test_exact_halves_round_to_even_like_python() -> None:
    values = np.array([-3.65625, 2.703125, 0.125, 12345.5, 12346.5])  # exact halves at 5 (or 2) digits
    rounded, exact = significant(values, 5)
    assert exact.all()
    assert rounded.tolist() == _python(values, 5).tolist() == [-3.6562, 2.7031, 0.125, 12346.0, 12346.0]


def test_non_finite_values_are_left_to_the_string_path() -> None:
    _, exact = significant(np.array([np.nan, np.inf, -np.inf]), 5)
    assert not exact.any()


def test_digits_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="digits"):
        significant(np.zeros(1), 12)
