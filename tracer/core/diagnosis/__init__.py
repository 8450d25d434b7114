"""What holds the training job back, judged from one typed input per interval.

`Diagnosis` (diagnosis.py) takes an `IntervalInput` (input.py) per interval, live or replayed
from a trace, splits each training loop's time by state (split.py), keeps the interval's
evidence in a window (evidence.py, window.py) and judges it with the rules (rules/, one module
per finding kind) against the thresholds (thresholds.py); words.py says the findings. The
rules and every threshold are documented in docs/diagnosis.md.
"""

from tracer.core.diagnosis.diagnosis import Diagnosis
from tracer.core.diagnosis.evidence import StartUp
from tracer.core.diagnosis.finding import KINDS, STATES, Finding, LoopInterval, RankLoop
from tracer.core.diagnosis.input import IntervalInput, Rank
from tracer.core.diagnosis.thresholds import (
    MAX_INTERVALS,
    MAX_PEERS,
    MAX_READ_FOLDERS,
    MAX_READ_PATHS,
    THRESHOLDS,
    Thresholds,
)
from tracer.core.diagnosis.words import ADVICE
from tracer.core.vocab import IO_KINDS

__all__ = ["ADVICE", "IO_KINDS", "KINDS", "MAX_INTERVALS", "MAX_PEERS", "MAX_READ_FOLDERS",
           "MAX_READ_PATHS", "STATES", "THRESHOLDS", "Diagnosis", "Finding", "IntervalInput",
           "LoopInterval", "Rank", "RankLoop", "StartUp", "Thresholds"]
