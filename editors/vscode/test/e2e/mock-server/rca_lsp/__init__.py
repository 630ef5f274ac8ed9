"""A stand-in for the real rca_lsp server, used only by the VS Code e2e test (scenario "mock-server").

It speaks the client contract (diagnostics with codes, hover, quick fix, rcaLsp/status, $/progress,
rcaLsp.server.writeOutputs / suggestMapping, configuration) with canned answers, so the extension's plumbing is
tested in a real VS Code independently of the analysis. Every message it gets that matters is appended as a JSON
line to $RCA_LSP_MOCK_LOG.
"""

import os

# The version it claims (the import check reads it, the initialize result carries it): RCA_LSP_MOCK_VERSION, by
# default the oldest the client accepts; the e2e sets an older one to see the client refuse it.
__version__ = os.environ.get("RCA_LSP_MOCK_VERSION", "0.1.0")
