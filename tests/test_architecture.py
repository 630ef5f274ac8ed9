"""The layout ARCHITECTURE.md promises: small modules, small packages, stages layered without cycles."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rca_lsp"
MAX_MODULE_LINES = 600
MAX_PACKAGE_MODULES = 15


def test_no_module_over_the_line_limit() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_package_over_the_module_limit() -> None:
    crowded = {
        str(folder.relative_to(PACKAGE.parent)): n
        for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir())]
        if (n := len([m for m in folder.glob("*.py") if m.name != "__init__.py"])) > MAX_PACKAGE_MODULES
    }
    assert crowded == {}


def test_every_package_says_what_it_owns() -> None:
    silent = [
        str(init.relative_to(PACKAGE.parent))
        for init in PACKAGE.rglob("__init__.py")
        if not init.read_text().lstrip().startswith('"""')
    ]
    assert silent == []


def test_stages_are_layered_without_cycles() -> None:
    """The import-linter contracts in pyproject.toml (layers, no LSP types below the server, no cycles)."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint is None:
        pytest.skip("import-linter is a dev dependency: pip install -e '.[dev]'")
    result = subprocess.run([lint], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
