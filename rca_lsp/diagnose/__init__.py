"""Stage 4, diagnosing: module verdicts ranked into suspects, the last aligned boundary and the first credible
divergence (root cause), and `analyze` / `analyze_paths`, the entry points every front end calls."""
