"""The diagnosis: what each wait was (waits), which finding claims it (claims), and the
findings: the rules that turn their claimed waits into sentences (rules), with their evidence
(evidence) and what the chains of wakeups came down to (roots), graded and ranked (findings);
and who waited for whom (waitgraph). The lock table (locks.toml, locktable) tells the waits'
frames apart."""
