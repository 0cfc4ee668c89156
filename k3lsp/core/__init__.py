"""The audit core: the pool of daemons, one run's values and results, the settings every front end reads."""
