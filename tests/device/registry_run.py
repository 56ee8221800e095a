"""The bad-input registry's valid calls, replayed on the fake CUDA device (:mod:`.fake_cuda`).

Each entry of ``tests/bad_inputs`` holds one small valid call of a public callable, in stages
(constructor, then methods such as ``fit`` and ``forward``). Here every stage runs inside
:func:`~.fake_cuda.fake_cuda` as a CUDA user would call it: every tensor argument moved to CUDA, a
module argument (or a constructed module) moved with ``.to("cuda")``, and a ``device`` argument
set to ``"cuda"``. Whatever CUDA would refuse then raises :class:`~.fake_cuda.DeviceMismatch`.

The calls the harness cannot judge are listed in ``not_judged.txt`` (``<entry>  # reason``), never
skipped silently: the list only shrinks (a listed entry that runs clean fails the test).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch
from bad_inputs.framework import Entry
from torch import nn

from .fake_cuda import FakeCuda, fake_cuda, to_fake_cuda

NOT_JUDGED_FILE = Path(__file__).parent / "not_judged.txt"


def not_judged() -> dict[str, str]:
    """``entry name or prefix* -> reason`` from ``not_judged.txt``."""
    out = {}
    for line in NOT_JUDGED_FILE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, reason = line.partition("#")
            out[name.strip()] = reason.strip()
    return out


def listed(name: str, table: dict[str, str]) -> str | None:
    """The reason ``name`` is not judged (exact name, or a ``prefix*`` line), or None."""
    if name in table:
        return table[name]
    for key, reason in table.items():
        if key.endswith("*") and name.startswith(key[:-1]):
            return reason
    return None


def _cuda_args(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in kwargs.items():
        if k == "device" and (v is None or v == "cpu" or v == torch.device("cpu")):
            out[k] = "cuda"
        else:
            out[k] = to_fake_cuda(v)  # the moves of a CUDA user: real ones on a real device
    return out


def run_on_cuda(entry: Entry) -> Any:
    """Run ``entry``'s valid call as a CUDA user would (every tensor, module and ``device`` on
    CUDA).

    Inside :func:`~.fake_cuda.fake_cuda` the moves are the harness' marks; on a machine with a GPU
    (the ``cuda``-marked tests of ``make gpu-check``) they are real. Returns the last stage's
    result.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        obj: Any = None
        result: Any = None
        for i, st in enumerate(entry.stages):
            kwargs = _cuda_args(st.args())
            if i == 0:
                result = obj = entry.target(**kwargs)
                if isinstance(obj, nn.Module):
                    obj = obj.to("cuda")
            elif st.method == "__call__":
                result = obj(**kwargs)
            else:
                result = getattr(obj, st.method)(**kwargs)
    return result


def run_on_fake_cuda(entry: Entry, capability: tuple[int, int] = (8, 0)) -> FakeCuda:
    """Run ``entry``'s valid call on the fake CUDA device; return the mode (its host-sync counts).

    Raises:
        DeviceMismatch: what CUDA would have refused.
    """
    with fake_cuda(capability) as mode:
        run_on_cuda(entry)
    return mode
