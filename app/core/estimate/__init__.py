"""Memory a run will need, before running it."""
