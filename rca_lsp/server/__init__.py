"""The language server: pygls handlers over the analysis core."""
