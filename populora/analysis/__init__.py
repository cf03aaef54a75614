"""Analysis of runs for the population-vs-baseline comparison: pure functions over plain data (spec 11, 14).

`intervals` (paired bootstrap, trend slope), `checkpoints` (equal-compute checkpoints), `dynamics` (program shapes,
coverage, oscillation, behavioural diversity), `diversity` (weight diversity from LoRA factors), `flops` (compute
in FLOPs). Nothing here reads a database, a file or the network; callers pass the numbers in.
"""
