"""``search=frontier``: find the throughput/memory frontier of a grid without running all of it (docs/search.md).

:mod:`.order` (the decisions on plain numbers: predicted fronts, "surely dominated", margins, whether a screen pays),
:mod:`.state` (what the search knows, read back from the records and ``search.json``), :mod:`.decide` (predictions,
the ``skipped`` records, the cost figures), :mod:`.driver` (the rounds, through the sweep's own Hydra launcher).
"""
