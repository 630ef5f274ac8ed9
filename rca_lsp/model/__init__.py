"""The types every stage passes around: module keys and their parts, one tensor's statistics and their algebra (shards
and fused parts aggregate exactly), and the dtype tolerances that decide when two statistics agree."""
