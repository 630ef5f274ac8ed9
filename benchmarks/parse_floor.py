"""Parse floor: read both dumps and orjson.loads them, holding both, as any analysis must at least do.

Run in a fresh process by bench_analyze.py, which measures its wall time and peak RSS. It is a lower bound,
so it skips the two avoidable CPython overheads: cyclic GC passes while millions of containers are created
(gc.disable(); they double the parse time) and freeing every object at exit (os._exit).
Exit status 0 on success, EXIT_NOT_STRICT_JSON when orjson rejects a dump (e.g. NaN/Infinity literals).
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import Any

import orjson
from bench_common import EXIT_NOT_STRICT_JSON


def main(argv: list[str]) -> int:
    gc.disable()
    loaded: list[Any] = []
    for path in map(Path, argv):
        try:
            loaded.append(orjson.loads(path.read_bytes()))
        except orjson.JSONDecodeError as exc:
            print(f"{path}: not strict JSON ({exc})", file=sys.stderr)
            return EXIT_NOT_STRICT_JSON
    print(", ".join(f"{len(doc['data'])} keys" for doc in loaded), flush=True)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
