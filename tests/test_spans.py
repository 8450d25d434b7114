"""live/spans.SpanClock: each write span's time counted once over readings, a span the kernel
opened again (an fsync of its file right after its close) included, from hand-made records."""

from tracer.core.abi import WriteSpans
from tracer.live.spans import SpanClock

A, B = (1, 10, 0), (1, 11, 0)
NONE = (0, 0, 0)


def spans(since=0, file=NONE, ended_since=0, ended=0, ended_file=NONE):
    return WriteSpans(since, file, ended_since, ended, ended_file)


def test_an_open_span_counts_as_it_passes_then_to_its_close():
    c = SpanClock()
    assert c.advance(1, spans(100, A), 300) == {A: 200}
    assert c.advance(1, spans(100, A), 500) == {A: 200}
    assert c.advance(1, spans(0, NONE, 100, 650, A), 700) == {A: 150}
    assert c.advance(1, spans(0, NONE, 100, 650, A), 900) == {}


def test_a_span_opened_again_goes_on_from_its_close():
    c = SpanClock()
    assert c.advance(1, spans(100, A), 300) == {A: 200}
    assert c.advance(1, spans(0, NONE, 100, 400, A), 500) == {A: 100}  # closed at 400
    # the fsync at 410 opened it again: 400-600, not 100-600
    assert c.advance(1, spans(100, A, 100, 400, A), 600) == {A: 200}
    assert c.advance(1, spans(0, NONE, 100, 900, A), 1000) == {A: 300}  # its second close


def test_closed_opened_again_and_closed_between_two_readings():
    c = SpanClock()
    assert c.advance(1, spans(100, A), 300) == {A: 200}
    assert c.advance(1, spans(0, NONE, 100, 900, A), 1000) == {A: 600}


def test_a_span_opened_again_then_the_next_save_in_one_interval():
    c = SpanClock()
    assert c.advance(1, spans(100, A, 100, 400, A), 500) == {A: 400}  # first seen reopened
    # A closed at 700 after its fsync, B opened at 750
    assert c.advance(1, spans(750, B, 100, 700, A), 1000) == {A: 200, B: 250}
    assert c.advance(1, spans(750, B, 100, 700, A), 1200) == {B: 200}


def test_processes_are_apart_and_forgotten():
    c = SpanClock()
    assert c.advance(1, spans(100, A), 300) == {A: 200}
    assert c.advance(2, spans(100, A), 300) == {A: 200}
    c.forget(1)
    assert c.advance(1, spans(100, A), 400) == {A: 300}
