"""Text from dumps and mapping files in Markdown (the report, the server's hovers): a key, path or dtype is a code span
whose backtick fence is longer than any backtick run it holds, and free text that names keys (a rationale, a reason, a
note) has every character that could start markup escaped. Both escape non-printable characters first (see
base.display: a line break cannot start a block, a bidi override cannot reorder the line). So `<script>`, `<img
onerror>` or a backtick in a key shows as text in any renderer, HTML allowed or not. Text without such characters
is written as it is.
"""

from __future__ import annotations

import re

from rca_lsp.base.display import shown

_BACKTICKS = re.compile(r"`+")
# CommonMark lets any ASCII punctuation be backslash-escaped. Escaped: what can start inline markup (code spans,
# emphasis, raw HTML and autolinks, GFM tables and strikethrough, math on GitHub); `](`, the only link or image
# without a definition (none can be written without a line break); an entity reference; in a table cell, `|`. `_`
# between two letters or digits can neither open nor close emphasis and is left, as are `[` and `>` (keys are full of
# `_`, arrows of `>`), and `|` outside a table (a table needs a delimiter row on the next line).
_MARKUP = re.compile(r"[\\`*<~$]|\](?=\()|&(?=#?\w+;)|(?<![^\W_])_|_(?![^\W_])")


def md_code(text: str, in_table: bool = False) -> str:
    """`text` as an inline code span that shows it exactly (`in_table`: in a GFM table cell, whose `|` must be
    escaped even inside a code span)."""
    text = shown(text)
    runs = _BACKTICKS.findall(text)
    fence = "`" * (max(map(len, runs)) + 1 if runs else 1)
    # a span starting or ending with a backtick needs a space there; a span that starts and ends with a space loses
    # one on each side when rendered, so it gets one more
    if text[:1] == "`" or text[-1:] == "`" or (text[:1] == " " and text[-1:] == " " and text.strip(" ")):
        text = f" {text} "
    elif not text:
        text = " "
    if in_table:
        text = text.replace("|", "\\|")
    return f"{fence}{text}{fence}"


def md_text(text: str, in_table: bool = False) -> str:
    """Free text shown as it is: non-printable characters escaped, and every character that could start markup
    backslash-escaped (`in_table`: in a GFM table cell, `|` too)."""
    escaped = _MARKUP.sub(lambda found: "\\" + found[0], shown(text))
    return escaped.replace("|", "\\|") if in_table else escaped
