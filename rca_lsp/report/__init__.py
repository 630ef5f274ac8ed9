"""Stage 5, reporting: the seed's output tables (JSON and CSV, msprobe's column names too), the root-cause report as
JSON, Markdown, HTML and PNG, the chart's data, the manifest of what a run wrote."""
