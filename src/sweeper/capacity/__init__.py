"""The capacity model: what a point needs in memory and time, without torch.

``arch`` (parameter counts, FLOPs per token from a config), ``memory`` (bytes per rank, term by term), ``timing``
(step time, communication), ``predict`` (one point's :class:`~sweeper.capacity.predict.Prediction`, the largest
batch) and ``calibrate`` (the efficiency measured points imply). It sits below the gate and the lifecycle
(:mod:`sweeper.point`), the batch search and the ``python -m sweeper.plan`` app, and above :mod:`sweeper.config`,
:mod:`sweeper.results` and :mod:`sweeper.units` (``docs/architecture.md``, the layers). Floor: ``capacity``, below
``point`` and above ``results``.
"""
