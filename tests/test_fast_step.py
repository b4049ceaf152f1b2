"""The hot path's shortcuts give exactly what the public way gives: ``fast_step`` / ``fast_chunk``
build the same objects as ``Step`` / ``Chunk`` (and refuse the same steps), and the simulated
clock's ``jump`` never passes an event that is due."""

import itertools
import re

import pytest

from batchsim.core.step import Chunk, Step, fast_chunk, fast_step
from batchsim.sim.executors import SimClock


def test_fast_chunk_is_a_chunk():
    c = fast_chunk(7, 3, 5, False)
    assert c == Chunk(7, 3, 5, False) and hash(c) == hash(Chunk(7, 3, 5, False))
    assert repr(c) == repr(Chunk(7, 3, 5, False)) and type(c) is Chunk


@pytest.mark.parametrize(
    "prefill, decode, kv_read, width, repeat, padding",
    list(
        itertools.product(
            [(), (Chunk(1, 0, 4),), (Chunk(1, 0, 4), Chunk(2, 8, 3, False))],
            [(), (5,), (5, 6, 9)],
            [0, 17],
            [0, 12],
            [0, 1, 4],
            # (padded_rows, prefill_padding, kv_padding), as the padded policies pass them; 20 >
            # kv_read is refused
            [(0, 0, 0), (1, 6, 5), (2, 0, 20)],
        )
    ),
)
def test_fast_step_is_step(prefill, decode, kv_read, width, repeat, padding):
    padded_rows, prefill_padding, kv_padding = padding
    kw = dict(
        prefill=prefill,
        decode=decode,
        padded_rows=padded_rows,
        prefill_padding=prefill_padding,
        kv_read=kv_read,
        kv_padding=kv_padding,
        decode_width=width,
        repeat=repeat,
        interruptible=True,
        preempted=(3,),
        kv_in_use=40,
    )
    pad = dict(padded_rows=padded_rows, prefill_padding=prefill_padding, kv_padding=kv_padding)
    try:
        want = Step(**kw)
    except ValueError as e:
        with pytest.raises(ValueError, match=re.escape(str(e))):
            fast_step(prefill, decode, kv_read, width, repeat, True, (3,), 40, **pad)
        return
    got = fast_step(prefill, decode, kv_read, width, repeat, True, (3,), 40, **pad)
    assert (
        got == want
        and hash(got) == hash(want)
        and repr(got) == repr(want)
        and vars(got) == vars(want)
    )
    with pytest.raises(AttributeError):
        got.repeat = 2  # still frozen


def test_jump_only_when_nothing_is_due():
    env = SimClock()
    env.at(2.0)
    assert not env.jump(2.0) and env.now == 0.0  # an event due at 2.0 might have to go first
    assert not env.jump(3.0) and env.now == 0.0
    assert env.jump(1.5) and env.now == 1.5
    env.run()
    assert env.now == 2.0 and env.jump(10.0) and env.now == 10.0
