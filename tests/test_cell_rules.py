"""Cell-mapping rules renamed through their index (CellRules) exactly as msprobe applies them one by one: a whole-name
rule alone, else every rule whose target the name holds at that point, in file order, on its first occurrence
(Hypothesis over rule sets on a small alphabet, so that targets overlap, chain and repeat)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rca_lsp.mapping.msprobe_names import CellRename, CellRules


def one_by_one(cell: str, rules: dict[str, str]) -> CellRename:
    """msprobe's process_cell_mapping, rule after rule."""
    if cell in rules:
        return CellRename(rules[cell], (cell,))
    name, applied = cell, []
    for target, golden in rules.items():
        if target and target in name:
            name = name.replace(target, golden, 1)
            applied.append(target)
    return CellRename(name, tuple(applied))


NAMES = st.text(alphabet="ab.L", max_size=14)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(NAMES, NAMES, max_size=12), st.lists(NAMES, max_size=8))
def test_indexed_rules_rename_as_msprobe_does(rules: dict[str, str], cells: list[str]) -> None:
    indexed = CellRules(rules)
    for cell in [*cells, *rules, *rules.values()]:
        assert indexed.rename(cell) == one_by_one(cell, rules)


def test_long_targets_and_chained_renames() -> None:
    rules = {
        "decoder.layers.10.mlp": "model.layers.10.mlp",
        "layers.1": "LAYERS.1",  # shorter than an index piece, and a prefix of another target
        "model.layers.10.mlp.linear_fc1": "model.layers.10.mlp.gate_up_proj",  # applies to what a rule before wrote
        "ColumnParallelLinear": "Linear",
    }
    for cell in ("decoder.layers.10.mlp.linear_fc1.ColumnParallelLinear", "decoder.layers.1.mlp.MLP", "x"):
        assert CellRules(rules).rename(cell) == one_by_one(cell, rules)
