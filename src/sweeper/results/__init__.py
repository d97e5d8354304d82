"""Records and rows: the result record (:mod:`.record`) and its atomic writer (:mod:`.atomic`), the rank files
(:mod:`.rankfile`) and what the driver makes of them (:mod:`.metrics`, :mod:`.outcome`, :mod:`.stats`), the sweep
directory (:mod:`.sweepdir`, :mod:`.opening`, :mod:`.collect`), the typed row and its columns (:mod:`.row`,
:mod:`.columns`), the Pareto frontier (:mod:`.frontier`) and MFU (:mod:`.mfu`). Driver side, no torch.

Floor (``docs/architecture.md``, the layers): ``results``, below ``capacity`` and above ``config | failures``.
"""
