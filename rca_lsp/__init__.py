"""rca-lsp: root-cause analysis of train/rollout numeric drift from msprobe dumps, in the editor.

Packages by stage, in the order data flows (each imports only those before it; ARCHITECTURE.md):
base -> model -> dumps -> mapping -> compare -> diagnose -> report | suggest -> server -> cli.
"""

__version__ = "0.1.0"
