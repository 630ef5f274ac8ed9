from rca_lsp.cli.main import main

raise SystemExit(main())
