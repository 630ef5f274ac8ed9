"""Relative tolerances by dtype: low-precision statistics are themselves rounded, so they need looser bounds."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

# Two correct bf16 runs differ by ~1e-2 relative in their statistics; fp32 paths agree to ~1e-6.
DEFAULT_TOLERANCES: dict[str, float] = {
    "float64": 1e-6,
    "float32": 1e-4,
    "float16": 5e-3,
    "bfloat16": 3e-2,
}
# bfloat16's machine epsilon, the gap between 1 and the next value: rounding to the nearest bfloat16 moves a number by
# at most half of it, relatively, so two numbers that agreed before each was rounded differ by at most it.
BFLOAT16_EPSILON = 2.0**-7
WARN_FACTOR = 100.0  # errors up to this multiple of the tolerance are "warn", beyond it "alert" (seed: 1e-4 / 1e-2)
_ALIASES = {
    "float": "float32",
    "half": "float16",
    "double": "float64",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
}


@lru_cache(maxsize=256)
def normalise_dtype(dtype: str | None) -> str | None:
    """`torch.bfloat16`, `mindspore.Float32`, `BFloat16` -> `bfloat16`, `float32`."""
    if dtype is None:
        return None
    name = dtype.rpartition(".")[2].lower()
    return _ALIASES.get(name, name)


def checked_tolerance(name: str, value: object) -> tuple[str, float]:
    """One tolerance override as (dtype, relative tolerance), the rule the command line and the server share:
    a dtype with a default tolerance (aliases such as bf16 or torch.float16 allowed) and a positive, finite
    number. ValueError saying what is wrong otherwise."""
    dtype = normalise_dtype(name.strip()) or ""
    if dtype not in DEFAULT_TOLERANCES:
        raise ValueError(f"unknown dtype {name!r} (expected {', '.join(DEFAULT_TOLERANCES)})")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"the tolerance for {dtype} must be a positive number, got {value!r}")
    return dtype, float(value)


@dataclass(frozen=True)
class Tolerances:
    by_dtype: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    _memo: dict[tuple[str | None, ...], float] = field(default_factory=dict, repr=False, compare=False)

    def for_dtypes(self, *dtypes: str | None) -> float:
        """The loosest tolerance among the dtypes involved (a comparison is only as precise as its coarser side)."""
        found = self._memo.get(dtypes)
        if found is None:
            found = self._memo[dtypes] = self._loosest(dtypes)
        return found

    def _loosest(self, dtypes: tuple[str | None, ...]) -> float:
        default = self.by_dtype.get("float32", DEFAULT_TOLERANCES["float32"])
        known = [self.by_dtype.get(normalise_dtype(d) or "", default) for d in dtypes if d is not None]
        return max(known, default=default)

    @classmethod
    def with_overrides(cls, overrides: dict[str, float] | None) -> "Tolerances":
        merged = dict(DEFAULT_TOLERANCES)
        for name, value in (overrides or {}).items():
            merged[normalise_dtype(name) or name] = float(value)
        return cls(merged)

    def key(self) -> tuple[tuple[str, float], ...]:
        return tuple(sorted(self.by_dtype.items()))
