"""The analysis core: plain Python, no LSP types. Used by the CLI, the server and the tests."""
