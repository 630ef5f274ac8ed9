"""Plumbing every stage shares, with no knowledge of dumps: typed input errors, reading user files safely, atomic output
files, forked background work, cancellation and GC pauses, lenient JSON, globs expanded within a bound."""
