"""The experiment room of the coordinator: the population against the AZR baseline at equal compute (`populora
experiment`, `populora eval`): its arms and manifest (plan), the run of both (runner), the scoring at compute
checkpoints (armeval, checkpointeval, evaluate, evalfiles), the comparison and its report (comparison,
equalcompute), the dynamics (armdynamics) and how children start (births). The run's room (step, phases,
journal, queue, workers) and the report of one run (report) stay beside it in coordinator/."""
