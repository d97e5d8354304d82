"""Capacity planning, ``python -m sweeper.plan``: the Hydra app (:mod:`.__main__`, :mod:`.app`) that predicts every
point of a planning grid (:mod:`.points`, :mod:`.rows`) with the capacity model, writes ``plan.csv``, ``plan.md``
and ``plan.png`` (:mod:`.table`, :mod:`.plot`), answers which configuration is fastest (:mod:`.answer`) and the
inverse question of a deadline (:mod:`.deadline`, :mod:`.deadline_report`). Nothing is launched; no torch import.

Floor (``docs/architecture.md``, the layers): the apps, ``__main__ | plan | wandb_report | status``, the top floor.
"""
