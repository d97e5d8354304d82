"""Where ranks run: the local launcher (:mod:`.local`; its ranks under torchrun, :mod:`.torchrun`, bounded by a
wall-clock and a host-memory limit, :mod:`.host_memory`, :mod:`.cgroup`), the driver side of the batch search
(:mod:`.batch_search`), the progress line (:mod:`.progress`), and the SLURM launcher (:mod:`.slurm`). Nothing here
imports torch: the ranks run in their own processes.

Floor (``docs/architecture.md``, the layers): ``launchers | tracking | search``, below ``report`` and above ``job``.
"""
