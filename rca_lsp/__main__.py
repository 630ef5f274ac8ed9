from rca_lsp.cli import main

raise SystemExit(main())
