"""Stage 3, comparing: statistics of mapped tensors compared under dtype tolerances, calibrated to the run's noise
floor; a module's calls joined; mapping groups built into module records (the seed's output_4 rows)."""
