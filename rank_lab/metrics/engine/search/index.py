"""Stage 1 of the certified search from a flat index (faiss or any ``knn`` callable).

Used by :mod:`rank_lab.metrics.engine.search.certified` (its kernels trust their inputs). An index
is a callable ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k), indices (Q, k))``
returning the top k of its inner products, sorted by decreasing score. :class:`IndexStage1` states
the arithmetic it is certified under: IEEE float32 inner products in any summation order (faiss' CPU
flat index, the contract of ``retrieval_metrics(knn=...)``), or a declared input rounding and
tensor-core accumulation (a GPU index whose cuBLAS math mode is not ours to pin: TF32 rounds the
inputs to 10 bits). :func:`scan_knn` lengthens the lists until the last returned score is below
the certification threshold; every lengthening doubles the list, so at most
``ceil(log2 N) + 1`` calls are made before the whole gallery has been returned, and a callable
that does not converge is stopped with an error in words.

faiss GPU indexes are never a stage 1 of ``knn_search`` / ``retrieval_metrics(backend="faiss")``:
on a CUDA device the flat index is built on the CPU (``docs/decisions.md``). Their GPU resources
(:func:`gpu_resources`) are created once per device and reused.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from rank_lab.metrics.engine._blocks import chunk_rows
from rank_lab.metrics.engine._blocks import progress as progress_bar
from rank_lab.metrics.engine.scores._stage1 import Stage1
from rank_lab.metrics.engine.scores.bound import bound_terms, threshold

__all__ = ["IndexStage1"]

#: ``knn(queries, gallery, k, exclude_self) -> (scores (Q, k), indices (Q, k))``
KnnFn = Callable[[torch.Tensor, torch.Tensor, int, bool], tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class IndexStage1:
    """A flat inner-product index used as stage 1, and the arithmetic it is certified under.

    Attributes:
        search: the :data:`KnnFn`.
        input_unit: relative rounding of the inputs inside the index (0: float32 as given; TF32:
            ``2^-11``). It enters the bound as measured residuals ``input_unit * ||x||`` would.
        tensor_cores: the index accumulates on NVIDIA tensor cores (``gamma_d(2^-22)``, see
            :mod:`rank_lab.metrics.engine.scores.bound`).
    """

    search: KnnFn
    input_unit: float = 0.0
    tensor_cores: bool = False


_GPU_RESOURCES: dict[int, object] = {}


def gpu_resources(device_index: int) -> object:
    """The faiss ``StandardGpuResources`` of one GPU, created on first use and reused (each holds
    temporary memory, about 18 % of the GPU: one per call would exhaust it)."""
    import faiss  # optional heavy dependency: imported only on a faiss GPU path

    if device_index not in _GPU_RESOURCES:  # pragma: no cover - GPU only
        _GPU_RESOURCES[device_index] = faiss.StandardGpuResources()
    return _GPU_RESOURCES[device_index]  # pragma: no cover - GPU only


def index_stage1(index: IndexStage1, q: torch.Tensor, g: torch.Tensor) -> Stage1:
    """The :class:`~rank_lab.metrics.engine.scores._stage1.Stage1` bound of an index over float32
    inputs."""
    st = Stage1(q, g, torch.float32, False)
    if index.input_unit or index.tensor_cores:  # pragma: no cover - declared by GPU indexes only
        qn = q.to(torch.float64).norm(dim=1)
        gn = float(g.to(torch.float64).norm(dim=1).max())
        u = float(index.input_unit)
        st.a, st.c, st.eta = bound_terms(
            qn,
            qn * (1 + u),
            qn * u,
            gn,
            gn * (1 + u),
            gn * u,
            q.shape[1],
            torch.float32,
            torch.bfloat16 if index.tensor_cores else torch.float32,
            torch.float32,
            tensor_cores=index.tensor_cores,
        )
    return st


def scan_knn(
    index: IndexStage1,
    st: Stage1,
    q: torch.Tensor,
    g: torch.Tensor,
    kq: torch.Tensor,
    exclude_self: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Candidates from a flat index: lists lengthened until their last score is below the threshold.

    Returns ``(rows, cols, s^, k-th s^)`` on the CPU (float64 scores). Indices outside the gallery
    (faiss' ``-1`` padding) are dropped.

    Raises:
        RuntimeError: in words, the index returned NaN scores, fewer items than asked for the whole
            gallery, or does not converge within the calls that doubling allows.
    """
    nq, n_g = q.shape[0], g.shape[0]
    n_avail = n_g - int(exclude_self)
    kmax = int(kq.max())
    todo = torch.arange(nq)
    width = min(n_avail, kmax + max(8, kmax // 4))
    first = True
    out_r, out_c, out_v = [], [], []
    kth = torch.empty(nq, dtype=torch.float64)
    calls, max_calls = 0, math.ceil(math.log2(max(n_avail, 2))) + 2
    while todo.numel():
        calls += 1
        if calls > max_calls:
            raise RuntimeError(
                f"the stage-1 index was called {max_calls} times with doubling list lengths and "
                f"{todo.numel()} queries are still not certified: it does not return its top k "
                "sorted by decreasing score (the knn contract of retrieval_metrics)"
            )
        if first:
            s, i = index.search(q, g, width, exclude_self)
        else:  # a subset of queries: search one more item and drop the query itself by index
            s, i = index.search(q[todo], g, min(n_g, width + int(exclude_self)), False)
        s, i = s.detach().cpu().to(torch.float64), i.detach().cpu().long()
        real = (i >= 0) & (i < n_g)
        if exclude_self and not first:
            real &= i != todo[:, None]
        s = torch.where(real, s, torch.full_like(s, -torch.inf))
        if bool(torch.isnan(s).any()):
            raise RuntimeError(
                "the stage-1 index returned NaN scores for finite embeddings whose products cannot "
                "overflow: the index is broken; use backend='torch'"
            )
        complete = width >= n_avail  # the whole gallery was returned: nothing lies beyond the lists
        last = s[:, -1]
        lam = torch.sort(s, dim=1, descending=True).values.gather(1, (kq[todo] - 1)[:, None])[:, 0]
        thr = threshold(lam, st.a[todo].cpu(), st.c, st.eta[todo].cpu(), torch.float64)
        done = (last < thr) | complete
        if complete and bool((real.sum(1) < kq[todo]).any()):
            raise RuntimeError(
                "the stage-1 index returned fewer real items than k although the whole gallery was "
                "asked for: it does not follow the knn contract of retrieval_metrics"
            )
        kth[todo[done]] = lam[done]
        keep = (s >= thr[:, None]) & real & done[:, None]
        rr, cc = torch.nonzero(keep, as_tuple=True)
        out_r.append(todo[rr])
        out_c.append(i[rr, cc])
        out_v.append(s[rr, cc])
        todo = todo[~done]
        width = min(n_avail, 2 * width)
        first = False
    return torch.cat(out_r), torch.cat(out_c), torch.cat(out_v), kth


def faiss_knn(chunk_size: int | None, max_memory_mb: float, progress: bool | None) -> IndexStage1:
    """Stage 1 of the faiss backend: a flat float32 ``IndexFlatIP`` on the CPU, whatever the device.

    Args:
        chunk_size: queries per search call (default: from ``max_memory_mb``, at most 16384).
        max_memory_mb: memory budget of one call's results.
        progress: tqdm bar (default: when there are more than 8 calls).

    Returns:
        An :class:`IndexStage1` (IEEE float32 inner products, the CPU BLAS).
    """

    def knn(
        q: torch.Tensor, g: torch.Tensor, k: int, es: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return _knn_faiss(q, g, k, es, chunk_size, max_memory_mb, progress)

    return IndexStage1(knn)


def _knn_faiss(q, g, k, exclude_self, chunk_size, max_memory_mb, progress):
    """The top-k of a flat float32 faiss index on the CPU."""
    try:
        import faiss  # optional heavy dependency: imported only for backend='faiss'
    except ImportError as exc:
        raise ImportError("backend='faiss' needs faiss: pip install faiss-cpu") from exc

    gn = np.ascontiguousarray(g.detach().to("cpu", torch.float32).numpy())
    index = faiss.IndexFlatIP(gn.shape[1])
    index.add(gn)
    kk = k + int(exclude_self)
    c = min(chunk_rows(kk * 4, max_memory_mb, chunk_size), 16384)
    n_chunks = math.ceil(q.shape[0] / c)
    show = n_chunks > 8 if progress is None else progress
    out_s, out_i = [], []
    for start in progress_bar(range(0, q.shape[0], c), n_chunks, show, "knn (faiss)"):
        qn = np.ascontiguousarray(q[start : start + c].detach().to("cpu", torch.float32).numpy())
        vals, idx = index.search(qn, kk)
        vals, idx = torch.from_numpy(vals), torch.from_numpy(idx)
        if exclude_self:
            own = torch.arange(start, start + qn.shape[0])[:, None]
            keep = idx != own
            # drop the query's own column when present, else the last column
            keep[keep.all(1), -1] = False
            vals = vals[keep].view(qn.shape[0], k)
            idx = idx[keep].view(qn.shape[0], k)
        out_s.append(vals)
        out_i.append(idx)
    return torch.cat(out_s), torch.cat(out_i)
