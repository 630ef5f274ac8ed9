"""The command lines on top of the stages: `rca-lsp analyze | serve | suggest-mapping | export-mapping`."""
