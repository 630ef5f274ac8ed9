"""Request handlers' work, one feature a module: hover, completion, code actions, navigation (definition, symbols),
chart data. Plain functions over the analysis and the document; app.py registers them."""
