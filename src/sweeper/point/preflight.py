"""The pre-flight, driver side: ask the libraries themselves whether they accept a point, before any rank starts
(docs/gate.md, "The pre-flight").

The driver never imports torch or transformers, so the libraries are asked by one worker process per driver
process (``python -m sweeper.job.preflight``, which builds the point's ``TrainingArguments``, FSDP plugin
arguments, DeepSpeed config, model on the meta device and callbacks). :func:`warm_up` starts it early (when a sweep
opens), so its imports overlap Hydra's composition; :func:`refusals` asks it about many points in one message
(:func:`refusal`: one point) and caches the answers for the process. A refusal is an
:class:`~sweeper.point.gate.InvalidPoint` with status ``invalid``, kind ``config`` and rule :data:`RULE_LIBRARY` (a
library refuses a value), :data:`RULE_NO_EFFECT` (an entry that changes nothing) or :data:`RULE_UNCONSUMED` (a
DeepSpeed block the Trainer's path never consumes). :func:`restating` gives the entries of an accepted point that
change none of its resolved library objects: :func:`sweeper.point.identity.point_id` leaves them out, so two points
whose resolved objects are equal are one point.

The pre-flight never stops a sweep by its own fault: a worker that cannot start, dies or answers nothing within
:data:`TIMEOUT_S` is said once on stderr and the points go on to the ranks (which still report what fails, later).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import IO, Any

from sweeper.config.spec import PointSpec
from sweeper.config.target import Target
from sweeper.point.gate import InvalidPoint

#: The worker module (the rank side of the torch boundary: it may import torch and transformers).
HELPER = "sweeper.job.preflight"
#: Shape version of the worker's answers (``sweeper.job.preflight.FORMAT``; not imported: rank side).
FORMAT = 1
#: Seconds the worker may take for one request (the first one imports torch, transformers and DeepSpeed).
TIMEOUT_S = 300.0
#: Rule ids of the pre-flight's refusals (docs/gate.md).
RULE_LIBRARY, RULE_NO_EFFECT, RULE_UNCONSUMED = "F01", "F02", "F03"
#: The worker's check names of the rules other than :data:`RULE_LIBRARY`.
_RULES = {"fsdp_effect": RULE_NO_EFFECT, "ds_unconsumed": RULE_UNCONSUMED}
#: Points per message to the worker (:data:`TIMEOUT_S` is per message; its costliest points take ~12 ms each).
BATCH = 500


class _Worker:
    """One ``python -m sweeper.job.preflight`` process: a JSON line in, a JSON line out."""

    def __init__(self) -> None:
        self.log: IO[str] = tempfile.TemporaryFile("w+", encoding="utf-8")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", HELPER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
        )
        self.lock = threading.Lock()  # one message at a time: the pre-flight's thread and the launcher share it

    def ask(self, points: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The worker's answers for ``points``, in order.

        Raises:
            RuntimeError: the worker died, timed out or answered in another shape (its last stderr line said).
        """
        with self.lock:
            answer = self._request({"points": points})
        results = answer.get("results")
        if not isinstance(results, list) or len(results) != len(points):
            raise RuntimeError("the worker answered in another shape")
        return results

    def launch(self, request: dict[str, Any]) -> tuple[int, int]:
        """Have the worker fork a launch process for ``request`` (:mod:`sweeper.job.forked_launch`); returns its pid
        and a pidfd of it (opened before the worker can reap it: the pid cannot have been reused).

        Raises:
            RuntimeError: the worker could not fork it, died, timed out or answered in another shape.
        """
        with self.lock:
            answer = self._request({"launch": request})
            pid = answer.get("pid")
            if not isinstance(pid, int):
                raise RuntimeError(str(answer.get("error") or "the worker answered in another shape"))
            return pid, os.pidfd_open(pid)

    def _request(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(request, default=str) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT_S)
            line = self.proc.stdout.readline() if ready else ""
        except OSError as e:
            raise RuntimeError(f"the worker stopped ({e}){self._last_words()}") from e
        if not ready:
            self.close()
            raise RuntimeError(f"no answer within {TIMEOUT_S:g} s{self._last_words()}")
        if not line:
            raise RuntimeError(f"the worker exited ({self.proc.poll()}){self._last_words()}")
        answer = json.loads(line)
        if not isinstance(answer, dict) or answer.get("format") != FORMAT:
            raise RuntimeError("the worker answered in another shape")
        return answer

    def _last_words(self) -> str:
        self.log.seek(0)
        lines = [ln.strip() for ln in self.log.read().splitlines() if ln.strip()]
        return f": {lines[-1][:300]}" if lines else ""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_worker: _Worker | None = None
_broken: list[str] = []
_answers: dict[str, dict[str, Any]] = {}
_restated: dict[str, frozenset[str]] = {}
_bases: dict[str, dict[str, Any]] = {}


def warm_up() -> None:
    """Start the worker now (it imports the libraries while the driver goes on); nothing happens when it runs
    already or could not start before."""
    global _worker
    if _worker is not None or _broken:
        return
    try:
        _worker = _Worker()
    except OSError as e:
        _give_up(f"the worker could not start: {e}")
        return
    atexit.register(_worker.close)


def _give_up(why: str) -> None:
    if not _broken:
        print(f"sweeper: pre-flight not run ({why}); points go to the ranks unchecked", file=sys.stderr, flush=True)
    _broken.append(why)


def refusal(spec: PointSpec, target: Target) -> InvalidPoint | None:
    """What the libraries refuse in ``spec`` on ``target`` (see the module doc), or None when they accept it or the
    pre-flight could not run. Cached per process."""
    return refusals([(spec, target)])[0]


def refusals(points: Sequence[tuple[PointSpec, Target]]) -> list[InvalidPoint | None]:
    """:func:`refusal` for each ``(spec, target)``, in order, the points not answered yet asked in one message per
    :data:`BATCH` distinct points (not one round trip each: a 1,000-point grid waited ~10 s on them). The worker
    checks every point's ``seed`` and the rest once per distinct point without its seed."""
    keys = [f"{target.device_type} {spec.to_json()}" for spec, target in points]
    todo = {k: (spec, target) for k, (spec, target) in zip(keys, points, strict=True) if k not in _answers}
    if todo:
        warm_up()
    asks = list(todo.items())
    for start in range(0, len(asks), BATCH):
        if _worker is None or _broken:
            break
        part = asks[start : start + BATCH]
        try:
            answers = _worker.ask([{"spec": s.to_dict(), "device": t.device_type} for _, (s, t) in part])
        except (RuntimeError, ValueError) as e:
            _give_up(str(e))
            break
        _answers.update(zip((k for k, _ in part), answers, strict=True))
        for (_, (s, _t)), answer in zip(part, answers, strict=True):
            _restated[_spec_key(s)] = frozenset(answer.get("restating") or ())
    return [_invalid(_answers[k]) if k in _answers else None for k in keys]


def refusals_later(points: Sequence[tuple[PointSpec, Target]]) -> Future[list[InvalidPoint | None]]:
    """:func:`refusals` of ``points``, asked on a thread: the caller goes on (writing files, say) while the worker
    answers, and takes the answers with ``.result()`` (a pre-flight that cannot run answers None for each point, as
    :func:`refusals` does; ``.result()`` raises only what :func:`refusals` would). Until then the caller asks the
    pre-flight nothing else (the worker takes one message at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sweeper-preflight")
    try:
        return pool.submit(refusals, list(points))
    finally:
        pool.shutdown(wait=False)  # the thread ends with its one task


def _invalid(answer: dict[str, Any]) -> InvalidPoint | None:
    found = answer.get("refusal")
    if not found:
        return None
    rule = _RULES.get(str(found.get("check")), RULE_LIBRARY)
    return InvalidPoint(str(found["message"]), tuple(found["keys"]), status="invalid", kind="config", rule=rule)


def _spec_key(spec: PointSpec) -> str:
    return spec.to_json()


def _model_base(model: str) -> dict[str, Any]:
    """``conf/model/<model>.yaml``'s ``config`` (cached; ``{}`` for a model without a file)."""
    if model not in _bases:
        from omegaconf import OmegaConf

        from sweeper.paths import conf_dir

        path = conf_dir() / "model" / f"{model}.yaml"
        loaded = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}
        base = loaded.get("config") if isinstance(loaded, dict) else None
        _bases[model] = dict(base) if isinstance(base, dict) else {}
    return _bases[model]


def may_restate(spec: PointSpec) -> bool:
    """Whether ``spec`` has an entry the libraries could resolve to what it is without it: a ``training_args`` or
    ``deepspeed_config`` entry, or a ``model.config`` key its model's config file does not have."""
    base = _model_base(spec.model)
    return bool(spec.training_args or spec.deepspeed_config or any(k not in base for k in spec.model_config))


def restating(spec: PointSpec, target: Target | None = None) -> frozenset[str]:
    """The dotted keys of ``spec``'s entries that change none of its resolved library objects
    (:func:`sweeper.job.preflight_resolved.restating`, asked of the worker for ``target``); without a ``target``,
    only what this process was already told about ``spec``. Empty for a refused point, a point without such entries,
    or when the pre-flight cannot run (then the identity is the spec's own, :mod:`sweeper.point.identity`)."""
    if not may_restate(spec):
        return frozenset()
    if target is not None:
        refusals([(spec, target)])
    return _restated.get(_spec_key(spec), frozenset())


def worker_pid() -> int | None:
    """The running worker's pid (the parent of the launch processes it forks); None when there is none."""
    if _worker is None or _broken or _worker.proc.poll() is not None:
        return None
    return _worker.proc.pid


def fork_launch(request: dict[str, Any]) -> tuple[int, int] | None:
    """Ask the worker to fork a point's launch process (``request``: :data:`sweeper.job.forked_launch.REQUEST_KEYS`);
    its pid and a pidfd, or None when there is no working worker (never started here, broken, or it could not fork:
    the caller starts the ranks itself). Never starts a worker: one that is not running has not imported the
    libraries either, so forking from it saves nothing."""
    if worker_pid() is None:
        return None
    try:
        return _worker.launch(request)  # type: ignore[union-attr]
    except (RuntimeError, ValueError, OSError):
        return None


def reset() -> None:
    """Stop this process's worker and forget its answers: the next :func:`refusal` starts a fresh worker (a benchmark
    timing the worker's start, a test that changes what the libraries see)."""
    global _worker
    if _worker is not None:
        _worker.close()
    _worker = None
    _answers.clear()
    _restated.clear()
    _broken.clear()
