"""The pytest process frees its compiled programs before it runs out of memory mappings (tests/memory_maps.py)."""

import numpy as np
import pytest

from tests import memory_maps

pytestmark = pytest.mark.skipif(memory_maps.map_count() == 0, reason="needs /proc/self/maps (Linux)")


def _compile_programs(count: int):
    """``count`` distinct compiled programs, each with a 2 MiB array mapped after it, so that one program's
    mappings never merge with the next one's and freeing it shows in the count."""
    import jax
    import jax.numpy as jnp

    programs, arrays = [], []
    for i in range(count):
        program = jax.jit(lambda x, i=i: jnp.tanh(x @ x.T + i).sum(0))
        program(jnp.ones((8, 8))).block_until_ready()
        programs.append(program)
        arrays.append(np.ones(1 << 18))
    return programs, arrays


def test_limit_and_count_are_read_from_procfs():
    assert memory_maps.max_map_count() > 1000
    assert 10 < memory_maps.map_count() < memory_maps.max_map_count()


def test_below_the_headroom_nothing_is_released():
    programs, _ = _compile_programs(3)
    maps = memory_maps.release_compiled_programs_if_near_limit(headroom=1e9)
    assert maps.before > 10 and maps.after is None and maps.limit == memory_maps.max_map_count()
    assert all(program._cache_size() == 1 for program in programs)


def test_past_the_headroom_the_compiled_programs_and_their_mappings_are_freed():
    programs, _arrays = _compile_programs(40)
    maps = memory_maps.release_compiled_programs_if_near_limit(headroom=0.0)
    assert maps.after is not None and maps.after <= maps.before - 40, maps  # ~3 per program: code, rodata, data
    assert all(program._cache_size() == 0 for program in programs)
