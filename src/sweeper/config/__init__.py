"""The configuration: the typed Hydra schema (:mod:`.schema`) and its frozen sections (:mod:`.sections`), the fast
composition of many grid points (:mod:`.compose`), one point as plain data (:mod:`.spec`, ``PointSpec``), where it
would run (:mod:`.target`, ``Target``) and the values a frozen spec or target derives once (:mod:`.frozen`).

Floor (``docs/architecture.md``, the layers): ``config | failures``, above the leaves (``units``, ``paths``,
``envinfo``, ``redact``) only. No torch import: composing and validating a large grid stays fast.
"""
