"""rca-lsp: root-cause analysis of train/rollout numeric drift from msprobe dumps, in the editor."""

__version__ = "0.1.0"
