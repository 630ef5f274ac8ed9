"""Errors about user input, carrying where the problem is so every front end can say it in one line."""

from __future__ import annotations

from dataclasses import dataclass

from rca_lsp.base.display import shown


@dataclass
class InputError(Exception):
    """Bad input: a file that cannot be read, parsed or used as asked."""

    path: str
    message: str
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based
    key: str | None = None

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        text = f"{where}: {self.message}"
        if self.key is not None:
            text += f" (key {self.key!r})"
        return shown(text)  # one line, whatever the path or message holds
