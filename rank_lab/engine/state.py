"""The engine's checkpoint side: its state, the resume rule, the fingerprint check, save and resume.

:class:`EngineState` is the part of :class:`rank_lab.engine.loop.Engine` that deals with checkpoints
(the engine inherits it): what a checkpoint holds (:meth:`EngineState.state_dict`), the checks
before a checkpoint is resumed (the resume rule of :func:`rank_lab.engine.guard.check_resume` and
the data and code fingerprints of :mod:`rank_lab.engine.fingerprint`), the sealed write
(:func:`rank_lab.engine.checkpoint.save_checkpoint`), the verified read with its fallback to the
previous file, and the report of what was restored (:mod:`rank_lab.engine.run_report`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rank_lab.engine import run_report
from rank_lab.engine.checkpoint import (
    CheckpointMismatchError,
    get_rng_state,
    read_checkpoint,
    save_checkpoint,
    set_rng_state,
)
from rank_lab.engine.fingerprint import code_fingerprint, data_fingerprint, short
from rank_lab.engine.guard import check_resume

__all__ = ["EngineState"]


class EngineState:
    """Checkpoint methods of :class:`~rank_lab.engine.loop.Engine` (which sets the attributes they
    use: ``modules``, ``optimizers``, ``scaler``, ``generators``, ``schedule``, ``config``,
    ``checkpoint``, ``epoch``, ``step``, ``history``, the run key, record and ``trained_on``
    arguments, ``report``)."""

    def run_key(self) -> dict[str, Any]:
        """What the run is (compared on resume)."""
        key = self._run_key() if callable(self._run_key) else self._run_key
        return dict(key or {})

    def record(self) -> dict[str, Any]:
        """The schedule record of the run (compared on resume by the resume rule)."""
        if self._record is not None:
            return self._record()
        s = self.schedule.to_dict() if self.schedule is not None else {"kind": "constant"}
        return {
            "epochs": self.config.epochs,
            "total_steps": s.pop("total_steps", None),
            "scheduler": s.pop("kind"),
            **s,
            "base_lrs": {
                f"{n}.{i}": g["base_lr"]
                for n, o in self.optimizers.items()
                for i, g in enumerate(o.param_groups)
            },
        }

    def fingerprint(self) -> dict[str, Any]:
        """What produced the run's checkpoints: ``{"data", "code", "parameters"}`` (computed once).

        ``data`` is :func:`~rank_lab.engine.fingerprint.data_fingerprint` of the engine's
        ``trained_on`` (``None`` without data), ``code``
        :func:`~rank_lab.engine.fingerprint.code_fingerprint`, ``parameters`` a hash of the run key
        (the key itself is compared by the resume rule).
        """
        if self._fingerprint is None:
            self._fingerprint = {
                "data": None
                if self._trained_on is None
                else data_fingerprint(
                    self._trained_on, state=[*self.modules.values(), *self.optimizers.values()]
                ),
                "code": code_fingerprint(),
                "parameters": data_fingerprint(self.run_key()),
            }
        return self._fingerprint

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to resume: modules and optimisers (under their names), grad scaler,
        generators, RNG states, epoch, step, history, the run key, the schedule record and the
        :meth:`fingerprint`."""
        state: dict[str, Any] = {"epoch": self.epoch, "step": self.step}
        state.update({n: m.state_dict() for n, m in self.modules.items()})
        state.update({n: o.state_dict() for n, o in self.optimizers.items()})
        state.update(
            {
                "scaler": self.scaler.state_dict(),
                "history": self.history,
                "config": self.run_key(),
                "rng": get_rng_state(),
                "schedule": self.record(),
                "fingerprint": self.fingerprint(),
                "generators": {n: g.get_state() for n, g in self.generators.items()},
            }
        )
        return state

    def check_fingerprint(self, state: Mapping[str, Any], source: str = "the checkpoint") -> None:
        """Refuse a checkpoint written for other data or by other code (one line saying why and how
        to start a new run).

        Raises:
            CheckpointMismatchError: the checkpoint has no fingerprint, or its data or code differ.
        """
        old = state.get("fingerprint")
        hint = f"to start a new run {self.new_run_hint}"
        if not isinstance(old, Mapping):
            raise CheckpointMismatchError(
                f"{source} records no fingerprint of its data and code, so nothing ties it "
                f"to this run; {hint}"
            )
        new = self.fingerprint()
        if old.get("data") != new["data"]:
            raise CheckpointMismatchError(
                f"{source} was written for other training data (data fingerprint "
                f"{short(old.get('data'))}, this run's {short(new['data'])}): resuming would "
                f"report training on data it never saw; {hint}"
            )
        if old.get("code") != new["code"]:
            oc, nc = dict(old.get("code") or {}), new["code"]
            diff = ", ".join(
                f"{k}: {short(oc.get(k)) if 'sha' in k else oc.get(k)} -> "
                f"{short(nc.get(k)) if 'sha' in k else nc.get(k)}"
                for k in sorted(set(oc) | set(nc))
                if oc.get(k) != nc.get(k)
            )
            raise CheckpointMismatchError(f"{source} was written by other code ({diff}); {hint}")

    def load_state_dict(
        self, state: Mapping[str, Any], check: bool = True, *, source: str = "the checkpoint"
    ) -> None:
        """Restore a :meth:`state_dict` after checking the resume rule and the fingerprint
        (``check``)."""
        if check:
            check_resume(
                state,
                self.run_key(),
                self.record(),
                source=source,
                free_keys=self.free_keys,
                hint=self.new_run_hint,
                unit=self.config.unit,
                length_free=self.schedule is None or self.schedule.length_free,
            )
            self.check_fingerprint(state, source)
        for n, m in self.modules.items():
            m.load_state_dict(state[n])
        for n, o in self.optimizers.items():
            o.load_state_dict(state[n])
        if "scaler" in state:
            self.scaler.load_state_dict(state["scaler"])
        for n, g in self.generators.items():
            g.set_state(state["generators"][n].cpu())
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
        self.history = state["history"]
        set_rng_state(state["rng"])

    def save(self, path: str | Path | None = None, state: Mapping[str, Any] | None = None) -> Path:
        """Write the state (default :meth:`state_dict`) to ``path`` (default the checkpoint):
        sealed, atomically, the file it replaces kept as the previous one
        (:func:`~rank_lab.engine.checkpoint.save_checkpoint`).

        Raises:
            NonFiniteTrainingError: a module holds NaN/inf (nothing is written: the checkpoint on
                disk stays the last good one).
        """
        path = Path(path) if path is not None else self.checkpoint
        if path is None:
            raise ValueError("no checkpoint path: set the checkpoint file or pass path")
        self.check_weights()
        save_checkpoint(dict(state) if state is not None else self.state_dict(), path)
        run_report.note_written(path)
        self.last_good_checkpoint = (path, self.step if self.config.unit == "step" else self.epoch)
        return path

    def resume_from(self, path: str | Path) -> None:
        """Load a checkpoint file (verified; the previous one when the newest is corrupt, with a
        warning; see :meth:`load_state_dict`)."""
        read = read_checkpoint(path, map_location=self.device, hint=self.new_run_hint)
        self.load_state_dict(read.state, source=f"checkpoint {str(read.path)!r}")
        done = self.step if self.config.unit == "step" else self.epoch
        self.last_good_checkpoint = (read.path, done)
        r = self.report
        r.resumed_from, r.fallback, r.restored, r.steps_restored = (
            str(read.path.absolute()),
            read.fallback_reason,
            done,
            self.step,
        )
        r.register()

    def maybe_resume(self) -> bool:
        """Resume from the checkpoint when ``config.resume`` and the file exists; return whether it
        did.

        Under :func:`rank_lab.engine.run_report.start_fresh` a checkpoint that this process did not
        write is ignored (and reported as such).
        """
        if not (self.config.resume and self.checkpoint is not None and self.checkpoint.is_file()):
            return False
        if run_report.is_fresh() and not run_report.written_here(self.checkpoint):
            self.report.ignored = str(self.checkpoint.absolute())
            self.report.register()
            return False
        self.resume_from(self.checkpoint)
        return True
