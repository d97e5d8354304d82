"""``search=frontier``: find the throughput/memory frontier of a grid without running all of it (docs/search.md).

:mod:`.order` (the decisions on plain numbers: predicted fronts, "surely dominated", margins, whether a screen pays),
:mod:`.schedule` (the next step on plain point ids: free slots filled, promotions first; wait; stop),
:mod:`.state` (what the search knows, read back from the records and ``search.json``), :mod:`.decide` (predictions,
the ``skipped`` records, the cost figures), :mod:`.jobs` (what the driver needs of a launcher), :mod:`.driver` (the
loop: a job ends, the search decides, the next job starts, through the sweep's own Hydra launcher).

Floor (``docs/architecture.md``, the layers): ``launchers | tracking | search``, below ``report`` and above ``job``;
it never imports the launchers (the SLURM launcher's :class:`~sweeper.search.jobs.Jobs` lives in
:mod:`sweeper.launchers.slurm.search_jobs`).
"""
