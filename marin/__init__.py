"""Marin-style open lab: versioned experiment DAGs, data steps, and an embedded JAX trainer."""

from marin.accelerators import keep_jax_off_absent_tpu

keep_jax_off_absent_tpu()  # before anything starts JAX: libtpu, when installed for compiling, costs CPU runs nothing
