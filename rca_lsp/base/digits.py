"""Numbers written in names and options (call indexes, layer numbers, rank and step folders, ports): ASCII digits
only. str.isdigit() passes superscripts that int() refuses (a ValueError where a name was expected), and int()
reads Arabic-Indic or fullwidth digits, signs and `1_0`; msprobe and the frameworks write none of those."""

from __future__ import annotations


def is_ascii_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()
