"""The SLURM launcher: job arrays through submitit (:mod:`.submit`), waiting on them (:mod:`.waiting`), the frontier
search's jobs (:mod:`.search_jobs`), the callable each SLURM task runs (:mod:`.in_job`), another Hydra app's task
function as jobs (:mod:`.hydra_task`), and what SLURM says: accounting (:mod:`.accounting`), the controller's queue
(:mod:`.queue`), the site's limits (:mod:`.site`).

Floor (``docs/architecture.md``, the layers): part of ``launchers`` (``launchers | tracking | search``);
:mod:`.in_job` is the declared exception to the torch boundary: it becomes a rank inside its job.
"""
