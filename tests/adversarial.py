"""Real fixtures with hostile text in them: copies whose dump keys (and the mapping naming them), dtypes or mapping
values carry what a careless or hostile user could put there (line breaks, bidi overrides, backticks and HTML,
CSV syntax, spreadsheet formulas). The dumps stay what msprobe wrote, but for the edited strings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Callable

from conftest import FIXTURES

# strings a key, a dtype or a path can carry
NEWLINE_RULE = "\nModule.evil.Linear.forward.0.input.0: Module.evil.Linear.forward.0.input.0\n#"
BIDI = "\u202eevil\u202c"
HTML = "`<img src=x onerror=alert(1)>``<script>alert(1)</script><svg onload=alert(1)>`"
CSV_SYNTAX = ("],[x,null,y", "a\rb")  # what the fast CSV path replaces; what makes it step aside
FORMULAS = ("=1+2", "+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\t=1", "\r=1")


def _dumps(folder: Path) -> list[Path]:
    return sorted(folder.glob("**/dump.json"))


def _edit_json(path: Path, edit: Callable[[Any], Any], indent: int | None = 1) -> None:
    path.write_text(json.dumps(edit(json.loads(path.read_text())), indent=indent))


def hostile_copy(variant: str, into: Path, old: str, new: str) -> Path:
    """A copy of the fixture in `into` whose keys have `old` replaced by `new`, in every dump (train and rollout)
    and in the mapping-key file (keys and values); `into` itself, with `mapping_key.json` beside `train`/`rollout`."""
    shutil.copytree(FIXTURES / variant, into)

    def keys(document: dict[str, Any]) -> dict[str, Any]:
        document["data"] = {key.replace(old, new): value for key, value in document["data"].items()}
        return document

    def value(item: Any) -> Any:
        return [value(part) for part in item] if isinstance(item, list) else item.replace(old, new)

    for dump in _dumps(into):
        _edit_json(dump, keys)
    _edit_json(into / "mapping_key.json", lambda m: {k.replace(old, new): value(v) for k, v in m.items()}, indent=2)
    return into


def set_dtypes(folder: Path, module_part: str, dtypes: list[str]) -> list[str]:
    """Give the output and input tensors of the first train module whose key holds `module_part` these dtypes (in
    turn); the dtypes set."""
    (dump,) = [path for path in _dumps(folder) if "train" in path.parts]
    document = json.loads(dump.read_text())
    entry = next(v for k, v in document["data"].items() if module_part in k)
    tensors = [t for slot in ("output", "input_args") for t in entry[slot] if isinstance(t, dict) and "dtype" in t]
    for tensor, dtype in zip(tensors, dtypes):
        tensor["dtype"] = dtype
    dump.write_text(json.dumps(document, indent=1))
    return dtypes[: len(tensors)]
