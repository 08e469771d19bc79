"""Rematerialization schedules: binomial checkpointing (revolve), √n segments, budgets,
and the explanations of what a schedule stores and recomputes."""
