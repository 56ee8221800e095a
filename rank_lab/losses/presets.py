"""The ROD framework ``(1 - lambda) L_rank + lambda L_DG`` and the papers' named loss presets.

``L_ROD-M = (1 - lambda) L_Sup-M + lambda L_DG`` (Eq. 3.2 of the Ramzi thesis; SupRank Eq. 2):
a SupRank surrogate of the metric plus a decomposability loss. Instances: ROADMAP (Eq. 3.12;
ROADMAP Eq. 2) for AP, ROD-R@K (Eq. 3.17; SupRank Eq. 17) for recall, and for hierarchical labels
HAPPIER (Eq. 4.11; SupRank Eq. 22) and ROD-NDCG (Eq. 4.15). Every preset is registered
(``build_loss("happier", n_classes=..., dim=...)``; ``list_losses(presets=True)``); the training
recipes that go with them (optimiser, schedule, sampler) are in :mod:`rank_lab.train.recipes`.

Named presets (exact values from the papers; ``**overrides`` reach the rank loss, ``lam`` the mix):

====================  ===============================================  ============================
preset                composition                                      source
====================  ===============================================  ============================
``roadmap_neurips``   SupAP(tau=0.01, rho=100) + L_DG(alpha=0.9,       ROADMAP (NeurIPS 2021) Sec. 4
                      beta=0.6), lambda = 0.5                          "ROADMAP settings"
``roadmap_tpami``     SupAP(tau=0.01, rho=100) + L*_DG (NormSoftmax,   SupRank Sec. VII / thesis
                      eta=0.05), lambda = 0.1                          Sec. 3.5 ("we use lambda=0.1";
                                                                       Tab. 3.3 keeps only L*_DG);
                                                                       eta from the official code
``rod_recall``        Sup-R@K(K={1,2,4,8,16}, tau*=1) + L*_DG          SupRank Eq. 17, Tab. II
                      (eta=0.05), lambda = 0.1                         (ROD-R@k with L*_DG); K, tau*
                                                                       follow Patel et al. / code
``happier``           Sup-H-AP(alpha=1) + L*_DG (NormSoftmax on the    Ramzi thesis Eq. 4.11, §4.4.1;
                      fine labels, eta=0.05), lambda = 0.1             eta from the official code
``happier_f``         HAPPIER with alpha = 5 (SOP) or 3 (iNat)         thesis §4.4.1; SupRank §VII-C
``rod_ndcg``          Sup-NDCG + L*_DG (eta=0.05), lambda = 0.1        thesis Eq. 4.15; code [0.9, 0.1]
====================  ===============================================  ============================

Paper vs code: the ROADMAP NeurIPS code sums SupAP and the calibration loss with weights 1 and 1
(equivalent to lambda = 0.5 up to a factor 2, ``weights=(1.0, 1.0)`` here); the TPAMI code uses
``weight: [0.9, 0.1]`` (= lambda 0.1). delta follows the thesis rule (0.04595; code 0.05).
"""  # noqa: E501

from __future__ import annotations

import torch
from torch import nn

from rank_lab._validation import check_positive_int, trusted_inputs
from rank_lab.losses.ap import SupAP
from rank_lab.losses.base import MetricLoss
from rank_lab.losses.decomposability import PairDGLoss, ProxyDGLoss
from rank_lab.losses.hierarchical import SupHAP, SupNDCG
from rank_lab.losses.prepared_batch import full_precision
from rank_lab.losses.recall import SupRecallAtK
from rank_lab.losses.registry import register_loss

__all__ = [
    "ROD",
    "roadmap_neurips",
    "roadmap_tpami",
    "rod_recall",
    "happier",
    "happier_f",
    "rod_ndcg",
    "HAPPIER_F_ALPHA",
]


class ROD(MetricLoss):
    """``(1 - lambda) * rank_loss + lambda * dg_loss`` (Eq. 3.2 of the Ramzi thesis).

    Args:
        rank_loss: a rank loss (e.g. :class:`~rank_lab.losses.ap.SupAP`).
        dg_loss: a decomposability loss (:class:`~rank_lab.losses.decomposability.PairDGLoss` or
            :class:`~rank_lab.losses.decomposability.ProxyDGLoss`).
        lam: lambda in ``[0, 1]`` (0.1: thesis; 0.5: ROADMAP NeurIPS).
        weights: explicit ``(w_rank, w_dg)`` instead of ``(1 - lam, lam)`` (e.g. the NeurIPS code's
            ``(1, 1)``).

    The call is the common one of :class:`~rank_lab.losses.base.MetricLoss`; a combination of
    losses, it hands the call to its parts: ``ref_embeddings`` go to the losses that use them (a
    proxy loss sees only the batch, as in the official code), so wrapping a ROD in a
    :class:`rank_lab.memory.MemoryLoss` gives the official ``(batch + memory) / 2`` per criterion.
    Parameters of the proxy loss (if any) are parameters of this module.
    """

    uses_references = True

    def __init__(
        self,
        rank_loss: nn.Module,
        dg_loss: nn.Module,
        lam: float = 0.1,
        weights: tuple[float, float] | None = None,
    ) -> None:
        super().__init__()
        if not 0.0 <= lam <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {lam}")
        self.rank_loss, self.dg_loss, self.lam = rank_loss, dg_loss, float(lam)
        self.normalize = all(getattr(m, "normalize", True) for m in (rank_loss, dg_loss))
        self.weights = (
            (1.0 - self.lam, self.lam)
            if weights is None
            else (float(weights[0]), float(weights[1]))
        )

    @full_precision
    def forward(
        self,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        ref_embeddings: torch.Tensor | None = None,
        ref_labels: torch.Tensor | None = None,
        *,
        ref_self_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Scalar ROD loss of ``embeddings (B, d)``, ``labels (B,)|(B, L)`` (+ optional refs)."""
        w_rank, w_dg = self.weights
        # validate once: the rank loss checks the inputs' values, the decomposability loss trusts
        # them
        out = w_rank * self.rank_loss(
            embeddings, labels, ref_embeddings, ref_labels, ref_self_index=ref_self_index
        )
        with trusted_inputs([self.dg_loss]):
            if getattr(self.dg_loss, "uses_references", True):
                dg = self.dg_loss(
                    embeddings, labels, ref_embeddings, ref_labels, ref_self_index=ref_self_index
                )
            else:
                dg = self.dg_loss(embeddings, labels)
        return out + w_dg * dg

    def extra_repr(self) -> str:
        return f"weights={self.weights}"


def _need(n_classes: int | None, dim: int | None, name: str) -> tuple[int, int]:
    if n_classes is None or dim is None:
        raise ValueError(
            f"{name} uses a proxy loss (L*_DG): pass n_classes (training fine classes) and dim "
            "(embedding size)"
        )
    return check_positive_int(n_classes, "n_classes"), check_positive_int(dim, "dim")


@register_loss("roadmap_neurips", preset=True)
def roadmap_neurips(
    lam: float = 0.5, alpha: float = 0.9, beta: float = 0.6, **overrides: object
) -> ROD:
    """ROADMAP as in the NeurIPS 2021 paper: SupAP + pair ``L_DG`` (alpha 0.9, beta 0.6), lambda
    0.5."""
    shared = {
        k: overrides[k] for k in ("normalize", "query_role", "hierarchy_level") if k in overrides
    }
    return ROD(SupAP(**overrides), PairDGLoss(alpha=alpha, beta=beta, **shared), lam=lam)  # type: ignore[arg-type]


@register_loss("roadmap_tpami", needs=("n_classes", "dim"), preset=True)
def roadmap_tpami(
    n_classes: int | None = None,
    dim: int | None = None,
    lam: float = 0.1,
    temperature: float = 0.05,
    **overrides: object,
) -> ROD:
    """ROADMAP as in the SupRank paper / thesis: SupAP + ``L*_DG`` (NormSoftmax, eta 0.05), lambda
    0.1."""
    c, d = _need(n_classes, dim, "roadmap_tpami")
    level = int(overrides.get("hierarchy_level", 0))  # type: ignore[call-overload]
    return ROD(
        SupAP(**overrides),
        ProxyDGLoss(c, d, temperature=temperature, hierarchy_level=level),
        lam=lam,
    )  # type: ignore[arg-type]


@register_loss("rod_recall", needs=("n_classes", "dim"), preset=True)
def rod_recall(
    n_classes: int | None = None,
    dim: int | None = None,
    lam: float = 0.1,
    temperature: float = 0.05,
    **overrides: object,
) -> ROD:
    """ROD-R@K (SupRank Eq. 17): Sup-R@K (K = {1, 2, 4, 8, 16}, tau* = 1) + ``L*_DG``, lambda
    0.1."""
    c, d = _need(n_classes, dim, "rod_recall")
    level = int(overrides.get("hierarchy_level", 0))  # type: ignore[call-overload]
    return ROD(
        SupRecallAtK(**overrides),
        ProxyDGLoss(c, d, temperature=temperature, hierarchy_level=level),
        lam=lam,
    )  # type: ignore[arg-type]


#: alpha of HAPPIER_F per dataset (thesis §4.4.1 / SupRank §VII-C: 5 on SOP, 3 on iNat-base/full).
HAPPIER_F_ALPHA = {"sop": 5.0, "inaturalist": 3.0, "inat_base": 3.0, "inat_full": 3.0}


# ------------------------------------------------------------------ hierarchical presets (Ramzi
# thesis ch. 4)
def _proxy(n_classes: int | None, dim: int | None, temperature: float, name: str) -> ProxyDGLoss:
    if n_classes is None or dim is None:
        raise ValueError(
            f"{name} uses L*_DG (fine-level NormSoftmax proxies): pass n_classes (training fine "
            "classes) and dim"
        )
    return ProxyDGLoss(n_classes, dim, temperature=temperature, hierarchy_level=0)


@register_loss("happier", needs=("n_classes", "dim"), hierarchical=True, preset=True)
def happier(
    n_classes: int | None = None,
    dim: int | None = None,
    lam: float = 0.1,
    alpha: float = 1.0,
    temperature: float = 0.05,
    **overrides: object,
) -> ROD:
    """HAPPIER (Eq. 4.11): ``(1 - lam) L_Sup-H-AP(alpha) + lam L*_DG``; alpha 1, lambda 0.1 (thesis
    §4.4.1).

    ``L*_DG`` is NormSoftmax on the fine labels (eta 0.05, official code). ``overrides`` reach
    :class:`~rank_lab.losses.hierarchical.SupHAP`. Returns a :class:`ROD`.
    """
    return ROD(
        SupHAP(alpha=alpha, **overrides), _proxy(n_classes, dim, temperature, "happier"), lam=lam
    )  # type: ignore[arg-type]


@register_loss("happier_f", needs=("n_classes", "dim"), hierarchical=True, preset=True)
def happier_f(
    n_classes: int | None = None,
    dim: int | None = None,
    dataset: str = "sop",
    lam: float = 0.1,
    alpha: float | None = None,
    **overrides: object,
) -> ROD:
    """HAPPIER_F: HAPPIER with a larger alpha (5 on SOP, 3 on iNat; thesis §4.4.1), more weight on
    fine levels.

    The papers do not state lambda for HAPPIER_F: 0.1 as HAPPIER by default; the official SOP config
    uses ``weight: [0.5, 0.5]`` (pass ``lam=0.5``).
    """
    key = dataset.lower().replace("-", "_")
    if alpha is None:
        if key not in HAPPIER_F_ALPHA:
            raise ValueError(
                f"unknown dataset {dataset!r} for HAPPIER_F; known: {sorted(HAPPIER_F_ALPHA)} (or "
                "pass alpha)"
            )
        alpha = HAPPIER_F_ALPHA[key]
    return happier(n_classes, dim, lam=lam, alpha=alpha, **overrides)


@register_loss("rod_ndcg", needs=("n_classes", "dim"), hierarchical=True, preset=True)
def rod_ndcg(
    n_classes: int | None = None,
    dim: int | None = None,
    lam: float = 0.1,
    temperature: float = 0.05,
    **overrides: object,
) -> ROD:
    """ROD-NDCG (Eq. 4.15): ``(1 - lam) L_Sup-NDCG + lam L*_DG``, lambda 0.1 (official code
    ``[0.9, 0.1]``)."""
    return ROD(SupNDCG(**overrides), _proxy(n_classes, dim, temperature, "rod_ndcg"), lam=lam)  # type: ignore[arg-type]
