"""The collector's pauses (base.gcpause) in the language server's process, which runs for hours."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVED_THEN_CYCLE = """
import gc, sys, weakref
from rca_lsp.base.gcpause import paused_gc
from rca_lsp.cli.main import main

main(["serve"])  # its input ends at once: the server stops, the process stays one that served


class Node:
    pass


node = Node()
node.me = node  # a cycle, alive while a parse or an analysis pauses the collector
freed = weakref.ref(node)
with paused_gc():
    pass
del node
gc.collect()
print("freed" if freed() is None else "kept")
"""


def test_a_cycle_alive_during_a_pause_of_the_servers_collector_is_freed_once_garbage() -> None:
    """paused_gc froze whatever was alive when it ended, for good: in the server, every cycle alive at some parse or
    analysis (an exception's traceback holding a replaced analysis, the report's matplotlib figures) stayed in
    memory when it became garbage, and memory grew with the number of saves."""
    done = subprocess.run(
        [sys.executable, "-c", SERVED_THEN_CYCLE],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "freed"
