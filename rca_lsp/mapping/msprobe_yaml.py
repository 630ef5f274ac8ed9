"""msprobe's mapping files as mapping-key files: `-dm data_mapping.yaml` and `-cm cell_mapping.yaml` (and the
cell_mapping.yaml msagent's module-name-mapper writes), recognised by their extension and read by their content.

A data mapping pairs tensors (`<module key>.input.0: <module key>.input.0`); its lines fold into module pairs,
several tensors of one module pair making one entry. A cell mapping pairs modules by `<path>.<Class>` (or renames
substrings of such names): it is resolved against the dumps, every call of a module (see `call_pairs`). As
`msprobe compare` does, modules that no line renames are paired with the module of the same name on the other
side, when there is one. The left side is the train run (msprobe's `-tp`, "NPU"), the right side the rollout
(`-gp`, "Bench"). The result is a ParsedMapping whose entries sit on the YAML lines they come from, so every
front end reports on the file as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import NamedTuple

import yaml

from rca_lsp.dumps.dump import Dump
from rca_lsp.mapping.model import LineIndex, MappingEntry, MappingIssue, ParsedMapping, Span
from rca_lsp.mapping.msprobe_names import CellRules, cell_name, is_tensor_name, parse_tensor_name
from rca_lsp.model.keys import ALL_CALLS

DATA, CELL = "data", "cell"
# the file does not parse as YAML (its own code: the JSON reader's `json-syntax` names another syntax); then the
# mapping-key file's codes, which keep their meaning here: a line names no module of the train dump (or none rca-lsp
# compares), or renames one into a name the rollout lacks; a name given twice
SYNTAX, UNKNOWN_TRAIN, UNKNOWN_ROLLOUT, DUPLICATE = (
    "yaml-syntax",
    "unknown-train-key",
    "unknown-rollout-key",
    "duplicate-key",
)

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()  # the tag the loader gives a plain scalar (a name, or true / 1 / null)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|$)")  # YAML's line breaks
# a line of two plain names in printable ASCII (what msprobe and msagent write), read without composing it alone
_PLAIN_PAIR = re.compile(
    r"((?![#'\"\[\]{},&*!|>%@`?:-])[!-~][!-~]*?):[ \t]+((?![#'\"\[\]{},&*!|>%@`?])[!-~][!-~]*?(?<!:))(?:[ \t]+#.*|[ \t]*)"
)
_STR = "tag:yaml.org,2002:str"
_TOP = Span(0, 0)  # where entries no line names are anchored (modules paired by their common name)
_KINDS = {
    "tag:yaml.org,2002:int": "a number",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "true/false",
    "tag:yaml.org,2002:null": "nothing (null)",
}


class Rule(NamedTuple):
    """One `left: right` line."""

    left: str
    right: str
    key: Span
    value: Span


@dataclass
class MsprobeMapping(ParsedMapping):
    """A YAML mapping file: its rules, and (once resolved against a dump pair) the entries they give."""

    kind: str | None = None  # data | cell; None for a file without rules
    rules: list[Rule] = field(default_factory=list)  # file order, duplicates included
    resolved_for: tuple[Dump, Dump] | None = None

    def for_dumps(self, train: Dump, rollout: Dump) -> ParsedMapping:
        if self.resolved_for is not None and self.resolved_for[0] is train and self.resolved_for[1] is rollout:
            return self
        resolve = _resolve_data if self.kind == DATA else _resolve_cells
        found = _Found()
        rules = self.rules if self.kind is not None else []
        resolve(_effective_rules(rules), train, rollout, found)
        found.identical(train, rollout, by_call=self.kind == DATA)
        entries, starts = found.entries()
        issues = sorted(self.issues + found.issues, key=lambda i: i.span.start)
        return MsprobeMapping(
            self.path, self.text, entries, starts, issues, self.syntax_ok, self.lines, None,
            kind=self.kind, rules=self.rules, resolved_for=(train, rollout),
        )  # fmt: skip


def parse_msprobe_mapping(path: str, text: str) -> MsprobeMapping:
    """The file's rules and the problems visible without the dumps: syntax, types, names of the wrong kind.
    A file that does not parse (mid-edit) keeps the rules of the lines that read on their own (see _salvaged)."""
    lines = LineIndex(text)
    issues: list[MappingIssue] = []
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except yaml.YAMLError as error:
        issues.append(_syntax_issue(error, text))
        rules = _salvaged(text, issues)
        syntax_ok = False
    else:
        if root is None:
            return MsprobeMapping(path, text, [], [], [], True, lines)
        if not isinstance(root, yaml.MappingNode):
            message = "an msprobe mapping file is a YAML mapping, one `left name: right name` a line"
            return MsprobeMapping(
                path, text, [], [], [MappingIssue("invalid-value", message, _span(root))], True, lines
            )
        rules = [rule for key, value in root.value if (rule := _rule(key, value, issues)) is not None]
        syntax_ok = True
    kind, rules = _kind(rules, issues)
    issues = sorted(issues + _duplicates(rules, lines), key=lambda i: i.span.start)
    return MsprobeMapping(path, text, [], [], issues, syntax_ok, lines, kind=kind, rules=rules)


def _salvaged(text: str, issues: list[MappingIssue]) -> list[Rule]:
    """The rules of the unindented lines that read on their own as one `left: right` pair: while a line is being
    typed, the others keep their rules (and their findings), as the JSON reader keeps the entries around a syntax
    error. Lines of two plain names are read by pattern; others (quoted names, a value of another type, which _rule
    reports) are composed alone; indented lines, comments and the rest are left out."""
    rules = []
    for line in _LINE.finditer(text):
        content, at = line.group().rstrip("\r\n"), line.start()
        if not content or content[0] in " \t#":
            continue
        plain = _PLAIN_PAIR.fullmatch(content)
        if plain is not None and _plain_tag(plain[1]) == _plain_tag(plain[2]) == _STR:
            rules.append(
                Rule(plain[1], plain[2], Span(at, at + plain.end(1)), Span(at + plain.start(2), at + plain.end(2)))
            )
            continue
        try:
            alone = yaml.compose(content, Loader=_LOADER)
        except yaml.YAMLError:
            continue
        if isinstance(alone, yaml.MappingNode) and len(alone.value) == 1:
            key, value = alone.value[0]
            rule = _rule(key, value, issues, at)
            rules += [rule] if rule is not None else []
    return rules


def _plain_tag(value: str) -> str:
    return _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))


def _span(node: yaml.Node, at: int = 0) -> Span:
    """The node's place in the file; `at`: the offset of the line it was composed from alone (see _salvaged)."""
    return Span(at + node.start_mark.index, at + node.end_mark.index)


def _syntax_issue(error: yaml.YAMLError, text: str) -> MappingIssue:
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    # the mark's character index, not its line: YAML also ends lines at U+0085, U+2028 and U+2029, LSP does not
    offset = min(mark.index, len(text)) if mark is not None else 0
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    context = getattr(error, "context", None)
    message = f"YAML syntax error: {problem}" + (f" ({context})" if context else "")
    return MappingIssue(SYNTAX, message, Span(offset, min(offset + 1, len(text))))


def _what(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode) and node.tag == _STR:
        return "an empty name"
    if isinstance(node, yaml.SequenceNode):
        return "a list (msprobe maps one name to one name; a 1:N group needs a mapping-key JSON)"
    if isinstance(node, yaml.MappingNode):
        return "a nested mapping"
    return _KINDS.get(node.tag, f"a {node.tag.rpartition(':')[2]} value")


def _rule(key: yaml.Node, value: yaml.Node, issues: list[MappingIssue], at: int = 0) -> Rule | None:
    if not (isinstance(key, yaml.ScalarNode) and key.tag == _STR and key.value):
        issues.append(MappingIssue("invalid-value", f"a name must be text, not {_what(key)}", _span(key, at)))
        return None
    if not (isinstance(value, yaml.ScalarNode) and value.tag == _STR and value.value):
        message = f"the right side must be a name (text), not {_what(value)}"
        issues.append(MappingIssue("invalid-value", message, _span(value, at), key.value))
        return None
    return Rule(key.value, value.value, _span(key, at), _span(value, at))


def _kind(rules: list[Rule], issues: list[MappingIssue]) -> tuple[str | None, list[Rule]]:
    """data when the names are tensor names (most of them; the others are reported), cell otherwise."""
    if not rules:
        return None, []
    tensors = sum(is_tensor_name(r.left) for r in rules)
    kind = DATA if 2 * tensors >= len(rules) else CELL
    kept = []
    for rule in rules:
        for name, span in ((rule.left, rule.key), (rule.right, rule.value)):
            if is_tensor_name(name) != (kind == DATA):
                issues.append(MappingIssue("invalid-value", _wrong_kind(kind), span, rule.left))
                break
        else:
            kept.append(rule)
    return kind, kept


def _wrong_kind(kind: str) -> str:
    if kind == DATA:
        return (
            "not an msprobe tensor name (<Module key>.forward.<n>.<input|output|parameters>.<index or name>) in a "
            "data mapping; a cell mapping line (<path>.<Class>) belongs in a file of its own (msprobe -cm)"
        )
    return "a tensor name (data mapping, msprobe -dm) in a cell mapping: give it a file of its own"


def _duplicates(rules: list[Rule], lines: LineIndex) -> list[MappingIssue]:
    first: dict[str, Rule] = {}
    issues = []
    for rule in rules:
        earlier = first.setdefault(rule.left, rule)
        if earlier is not rule:
            line = lines.position(earlier.key.start)[0] + 1
            message = f"duplicate name: also defined at line {line}; the last definition is the one used"
            issues.append(MappingIssue(DUPLICATE, message, rule.key, rule.left))
    return issues


def _effective_rules(rules: list[Rule]) -> dict[str, Rule]:
    """Left name -> rule as yaml.safe_load reads the file: the place of the first definition, the last's value."""
    found: dict[str, Rule] = {}
    for rule in rules:
        found[rule.left] = rule  # a dict keeps the first insertion's place
    return found


class _Found:
    """Module pairs found so far, each with the line it comes from."""

    def __init__(self) -> None:
        self.pairs: dict[str, tuple[str, Rule | None]] = {}  # train key -> (rollout key, its line)
        self.issues: list[MappingIssue] = []

    def issue(self, code: str, message: str, rule: Rule) -> None:
        self.issues.append(MappingIssue(code, message, rule.key, rule.left))

    def identical(self, train: Dump, rollout: Dump, by_call: bool) -> None:
        """Modules no line pairs, paired with the module of the same name in the rollout (as msprobe matches
        names left as they are): call by call in a data mapping, every call (`call_pairs`) in a cell mapping."""
        if by_call:
            for key in train.keys:
                if key not in self.pairs and key in rollout.entries:
                    self.pairs[key] = (key, None)
            return
        rollout_cells = _cells(rollout)
        for cell, keys in _cells(train).items():
            if cell in rollout_cells and not any(k in self.pairs for k in keys):
                for train_key, rollout_key in call_pairs(keys, rollout_cells[cell]):
                    self.pairs[train_key] = (rollout_key, None)

    def entries(self) -> tuple[list[MappingEntry], list[int]]:
        placed = sorted(self.pairs.items(), key=lambda item: item[1][1].key.start if item[1][1] else 0)
        entries, starts = [], []
        for train_key, (rollout_key, rule) in placed:
            key, value = (rule.key, rule.value) if rule is not None else (_TOP, _TOP)
            relative = (value.start - key.start, value.end - key.start)
            entries.append(MappingEntry(train_key, (rollout_key,), False, key.end - key.start, (relative,), relative))
            starts.append(key.start)
        return entries, starts


def _resolve_data(rules: dict[str, Rule], train: Dump, rollout: Dump, found: _Found) -> None:
    """Tensor lines folded into module pairs; a module's tensors paired with two different modules: the first."""
    for rule in rules.values():
        left, right = parse_tensor_name(rule.left), parse_tensor_name(rule.right)
        if left is None or right is None:
            message = "unknown train key: an API-level tensor or a gradient; rca-lsp compares modules, line left out"
            found.issue(UNKNOWN_TRAIN, message, rule)
            continue
        if left.direction != "forward" or right.direction != "forward":
            found.issue(
                UNKNOWN_TRAIN,
                "unknown train key: a backward tensor; rca-lsp compares forward calls, line left out",
                rule,
            )
            continue
        earlier = found.pairs.get(left.module_key)
        if earlier is None:
            found.pairs[left.module_key] = (right.module_key, rule)
        elif earlier[0] != right.module_key:
            found.issue(
                DUPLICATE,
                f"another tensor of {left.module_key} is mapped to {earlier[0]}; rca-lsp pairs whole modules and "
                f"uses that first pair, not {right.module_key}",
                rule,
            )


def _cells(dump: Dump) -> dict[str, list[str]]:
    """Cell name -> the forward keys of its calls, in call order."""
    cells: dict[str, list[str]] = {}
    for key in dump.keys:
        name = cell_name(key)
        if name is not None and name not in cells:
            cells[name] = dump.calls_of(f"{key.rpartition('.')[0]}.{ALL_CALLS}")
    return cells


def call_pairs(train_calls: list[str], rollout_calls: list[str]) -> list[tuple[str, str]]:
    """Train call -> rollout key(s) for two modules a cell mapping pairs: call by call when both have as many
    calls (msprobe's pairing); else every train call against all rollout calls (`forward.*`: one recompute
    against a decode's calls, micro-batches against calls), or against the rollout's only call."""
    if len(rollout_calls) == 1:
        return [(key, rollout_calls[0]) for key in train_calls]
    if len(train_calls) == len(rollout_calls):
        return list(zip(train_calls, rollout_calls))
    every = f"{rollout_calls[0].rpartition('.')[0]}.{ALL_CALLS}"
    return [(key, every) for key in train_calls]


def _resolve_cells(rules: dict[str, Rule], train: Dump, rollout: Dump, found: _Found) -> None:
    """Each train module renamed by the rules (msprobe's process_cell_mapping), paired with the rollout module of
    the new name; rules that rename nothing, or into a name the rollout lacks, are reported on their line."""
    renames = CellRules({left: rule.right for left, rule in rules.items()})
    rollout_cells = _cells(rollout)
    applied: dict[str, int] = {}
    missing: dict[str, list[tuple[str, str]]] = {}
    for cell, keys in _cells(train).items():
        renamed = renames.rename(cell)
        if not renamed.rules:
            continue
        for left in renamed.rules:
            applied[left] = applied.get(left, 0) + 1
        rule = rules[renamed.rules[-1]]  # the last rule that applied: the most specific, in files written broad first
        target = rollout_cells.get(renamed.name)
        if target is None:
            missing.setdefault(rule.left, []).append((cell, renamed.name))
            continue
        for train_key, rollout_key in call_pairs(keys, target):
            found.pairs[train_key] = (rollout_key, rule)
    for left, rule in rules.items():
        if left not in applied:
            found.issue(UNKNOWN_TRAIN, f"unknown train key: matches no module of the train dump {train.path}", rule)
        elif left in missing:
            cell, name = missing[left][0]
            more = f" (and {len(missing[left]) - 1} more)" if len(missing[left]) > 1 else ""
            message = (
                f"unknown rollout key: renames {cell} to {name}, which the rollout dump {rollout.path} lacks{more}"
            )
            found.issue(UNKNOWN_ROLLOUT, message, rule)
