"""Stage 2, the mapping: the mapping-key JSON (entries, spans, issues), msprobe's data_mapping / cell_mapping YAML in
and out, msprobe's tensor names, and the check of a mapping against its dumps."""
