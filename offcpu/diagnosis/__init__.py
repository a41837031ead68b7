"""The diagnosis: what each wait was (waits), which finding claims it (claims), who waited
for whom (waitgraph), and the findings named with their evidence and fix; the lock table
(locks.toml) tells the waits' frames apart (locktable)."""
