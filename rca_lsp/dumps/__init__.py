"""Stage 1, reading dumps: a dump source (one dump.json, rank folders, step folders) becomes one `Dump`: msprobe's JSON
decoded into module entries, ranks merged (`ranks/`), decode steps joined, loaded in forked children and cached."""
