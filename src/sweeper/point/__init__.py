"""One point before and after its ranks run: its life, the same for every launcher (:mod:`.lifecycle`), its identity
(:mod:`.identity`), the gate (:mod:`.gate`, the rules in :mod:`.rules`) and the pre-flight's driver side
(:mod:`.preflight`), the sweep as Hydra composed it (:mod:`.context`), the prediction every record carries
(:mod:`.prediction`), the largest-batch search's decisions (:mod:`.batch_search`) and the device budget
(:mod:`.device_budget`).

Floor (``docs/architecture.md``, the layers): ``point``, below ``job`` and above ``capacity``. No torch import.
"""
