"""Marin-style open lab: versioned experiment DAGs, data steps, and an embedded JAX trainer."""
