"""Numbers rounded to significant digits as arrays, to the same doubles as Python's `float(f"{v:.{digits}g}")`.

The chart shows 10^5 modules' errors and statistics rounded for display; formatting each through a string took
most of its time. Here a value is scaled by an exact power of ten, rounded to an integer (half to even, as Python
formats an exact half) and scaled back, which divides or multiplies exact numbers once and so rounds to the nearest
double as parsing the decimal text does. The integer is the correctly rounded one when the scaling was exact (no
rounding error: low-precision values, bfloat16 statistics, often land on an exact half) or the scaled value is not
within its rounding error of a half. A zero is itself (sign kept, as the text "-0" parses). What this cannot do
exactly (non-finite values, powers of ten beyond 10^22, an inexact near-half, a logarithm one off) is left to the
string path: False in the mask `significant` returns."""

from __future__ import annotations

import numpy as np

_EXACT_POWERS = 22  # 10**22 is the largest power of ten a double holds exactly
_POWERS = np.array([float(10**k) for k in range(_EXACT_POWERS + 1)])  # from integers: exact, whatever pow() does
_HALF_MARGIN = 1e-6  # far above the scaled value's rounding error (< 10**digits * 2**-53) for digits <= 9
_SPLIT = 2.0**27 + 1.0  # Veltkamp's constant: splits a double into two halves of 26 bits


def _halves(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    big = _SPLIT * values
    high = big - (big - values)
    return high, values - high


def _product_is_exact(a: np.ndarray, b: np.ndarray, product: np.ndarray) -> np.ndarray:
    """Whether `product` (a * b rounded) is a * b exactly: Dekker's error of the product is zero (no overflow or
    underflow in the range `significant` uses)."""
    a_high, a_low = _halves(a)
    b_high, b_low = _halves(b)
    error = ((a_high * b_high - product) + a_high * b_low + a_low * b_high) + a_low * b_low
    return error == 0.0


def significant(values: np.ndarray, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """(rounded, exact): each value to `digits` significant digits, and where that is float(f"{v:.{digits}g}")
    for sure; elsewhere the rounded value is not to be used."""
    if not 1 <= digits <= 9:
        raise ValueError(f"digits must be 1..9, not {digits}")
    with np.errstate(all="ignore"):
        exponent = np.floor(np.log10(np.abs(values)))
        power = (digits - 1) - exponent  # scaled by 10**power, the digits are the integer part
        steps = np.abs(np.where(np.isfinite(power), power, 0.0))
        scale = _POWERS[np.minimum(steps, _EXACT_POWERS).astype(np.intp)]  # not used where steps > 22
        up = power >= 0
        scaled = np.where(up, values * scale, values / scale)
        whole = np.rint(scaled)
        rounded = np.where(up, whole / scale, whole * scale)
        near_half = np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) <= _HALF_MARGIN
        if near_half.any():  # exact scaling: the half (or near-half) is the value's own, rint rounds it right
            scaled_exactly = np.where(
                up,
                _product_is_exact(values, scale, scaled),
                (scaled * scale == values) & _product_is_exact(scaled, scale, values),
            )
            near_half &= ~scaled_exactly
        size = np.abs(whole)
        zero = values == 0.0
        exact = zero | (
            np.isfinite(values)
            & (steps <= _EXACT_POWERS)
            & ~near_half
            # an exponent one off (log10 of a value next to a power of ten) shows as a digit too many or too few
            & (size >= 10.0 ** (digits - 1))
            & (size <= 10.0**digits)
        )
        rounded = np.where(zero, values, rounded)
    return rounded, exact
