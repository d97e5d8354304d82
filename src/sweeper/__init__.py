"""sweeper: which distributed-training configuration is fastest and still fits in memory?

Flow: Hydra grid -> point spec (:mod:`sweeper.spec`) -> job (:mod:`sweeper.launch`, ranks run
:mod:`sweeper.harness`) -> result record (:mod:`sweeper.record`) -> frontier and report (:mod:`sweeper.report`).
"""

__version__ = "0.1.0"
