"""Stable diagnostic codes (documented in the README) and their default severities."""

from __future__ import annotations

from lsprotocol import types

from rca_lsp.diagnose import rootcause as cause

SOURCE = "rca-lsp"

JSON_SYNTAX = "json-syntax"
YAML_SYNTAX = "yaml-syntax"
INVALID_VALUE = "invalid-value"
DUPLICATE_KEY = "duplicate-key"
UNKNOWN_TRAIN_KEY = "unknown-train-key"
UNKNOWN_ROLLOUT_KEY = "unknown-rollout-key"
NOT_DUMPED = "not-dumped"
UNPAIRED = "unpaired-mapping"
DUMP_PROBLEM = "dump-problem"
MISSING_OP_CODE = "missing-op"
BOUNDARY = "aligned-boundary"
PARAMETER_SYNC = "parameter-sync"
IN_MODULE_DIFF = "in-module-diff"
UPSTREAM_CODE = "upstream-propagation"
MANUAL_REVIEW = "needs-review"
FUSED_STRUCTURAL = "fused-structural"
UNMAPPED_TRAIN = "unmapped-train-module"
NAN_INF = "nan-inf"
RANK_DISAGREEMENT_CODE = "rank-disagreement"
CALL_DISAGREEMENT_CODE = "call-disagreement"
INPUT_DATA_CODE = "input-data"
TRAIN_DATA_GROUP = "train-data-group"

CLASSIFICATION_CODES = {
    cause.MISSING_OP: MISSING_OP_CODE,
    cause.PARAMETER: PARAMETER_SYNC,
    cause.IN_MODULE: IN_MODULE_DIFF,
    cause.UPSTREAM: UPSTREAM_CODE,
    cause.MANUAL: MANUAL_REVIEW,
    cause.RANK_DISAGREEMENT: RANK_DISAGREEMENT_CODE,
    cause.CALL_DISAGREEMENT: CALL_DISAGREEMENT_CODE,
    cause.INPUT_DATA: INPUT_DATA_CODE,
}

_S = types.DiagnosticSeverity
DEFAULT_SEVERITY = {
    JSON_SYNTAX: _S.Error,
    YAML_SYNTAX: _S.Error,
    INVALID_VALUE: _S.Error,
    DUPLICATE_KEY: _S.Warning,
    UNKNOWN_TRAIN_KEY: _S.Error,
    UNKNOWN_ROLLOUT_KEY: _S.Error,
    NOT_DUMPED: _S.Warning,
    UNPAIRED: _S.Information,
    DUMP_PROBLEM: _S.Error,
    MISSING_OP_CODE: _S.Warning,
    BOUNDARY: _S.Information,
    PARAMETER_SYNC: _S.Warning,
    IN_MODULE_DIFF: _S.Warning,
    UPSTREAM_CODE: _S.Warning,
    MANUAL_REVIEW: _S.Information,
    FUSED_STRUCTURAL: _S.Hint,
    UNMAPPED_TRAIN: _S.Hint,
    NAN_INF: _S.Error,
    RANK_DISAGREEMENT_CODE: _S.Warning,
    CALL_DISAGREEMENT_CODE: _S.Warning,
    INPUT_DATA_CODE: _S.Warning,
    TRAIN_DATA_GROUP: _S.Information,
}
SEVERITY_BY_NAME = {"error": _S.Error, "warning": _S.Warning, "information": _S.Information, "hint": _S.Hint}
