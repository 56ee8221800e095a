"""Simple CNAPS' regularised Mahalanobis classifier and the nearest-mean / kNN baselines.

Eqs. 5.1-5.2 of the Gominski thesis (Bateni et al. 2020, "Simple CNAPS"): a query ``x`` goes to
the class ``c`` minimising

    d(x, c) = 1/2 (x - mu_c)^T Q_c^{-1} (x - mu_c),     Q_c = lambda_k Sigma_c + (1 - lambda_k)
    Sigma + I

with ``mu_c`` the mean of the ``k_c`` support descriptors of class ``c``, ``Sigma_c`` their
covariance, ``Sigma`` the covariance of *all* support vectors (the task covariance) and
``lambda_k = k_c / (k_c + 1)`` (k = 1: ``Q_c = Sigma_c/2 + Sigma/2 + I``; k = 5:
``5/6 Sigma_c + 1/6 Sigma + I``). Covariances are the unbiased estimates (``1/(n - 1)``, as in the
Simple CNAPS code); the code's logits drop the 1/2 (``half=False``; same argmax).

**One shot.** A class with a single support vector has no spread: its covariance estimate is
``0/0`` with the unbiased estimator, and the clean rule (default, ``one_shot="zero"``) takes
``Sigma_c = 0``, i.e. ``Q_c = Sigma/2 + I``. The public Simple CNAPS code (``estimate_cov``) does
not transpose a ``1 x D`` input: it returns the *scalar* variance of the D entries of that one
vector (a variance across features, meaningless here), which is then added to *every* entry of
``Q_c`` (``Q_c = lambda s 11^T + (1 - lambda) Sigma + I``). ``one_shot="simplecnaps"`` reproduces it
for comparison only; the book shows the difference.

**Scale.** The ``+ I`` term is scale-dependent: for unit-norm descriptors in high dimension the
covariances are much smaller than ``I`` and the rule is close to a (shrunk) Euclidean nearest mean
(Gominski thesis §5.4-5.5); ``identity_scale`` exposes the coefficient (1 in the thesis).

Baselines: :func:`nearest_mean_logits` (Euclidean or cosine prototypes, Snell et al.; thesis
§3.4.3) and kNN voting through :func:`rank_lab.metrics.classification.knn_classify` (not used in
the thesis; a non-thesis baseline).
"""

from __future__ import annotations

import torch

from rank_lab._validation import (
    check_embeddings,
    check_float,
    check_labels,
    check_overflow,
    check_positive_int,
    unit_rows,
)

__all__ = [
    "covariance",
    "simplecnaps_estimate_cov",
    "lambda_k",
    "MahalanobisClassifier",
    "mahalanobis_logits",
    "nearest_mean_logits",
]


def covariance(x: torch.Tensor) -> torch.Tensor:
    """Unbiased covariance ``(D, D)`` of the rows of ``x (n, D)``, ``n >= 2``.

    Raises:
        ValueError: for ``n < 2`` (the unbiased estimate divides by ``n - 1``: a single vector has
            none; :class:`MahalanobisClassifier` states its one-shot rule with ``one_shot``), for
            NaN/inf or a wrong shape, for a covariance that overflows ``x``'s dtype.
    """
    x = check_embeddings(x, "x")
    if x.shape[0] < 2:
        raise ValueError(
            f"x has n={x.shape[0]} row(s): the unbiased covariance needs n >= 2 (it divides by n - "
            "1)"
        )
    xc = x - x.mean(0, keepdim=True)
    return check_overflow(xc.T @ xc / (x.shape[0] - 1), "x", "the covariance entries")


def simplecnaps_estimate_cov(x: torch.Tensor) -> torch.Tensor:
    """The Simple CNAPS code's ``estimate_cov`` (documented quirk; use :func:`covariance`).

    For ``n >= 2`` it equals :func:`covariance`. For ``n = 1`` it returns a 0-d tensor: the
    unbiased variance of the ``D`` entries of the single vector
    (``1/(D - 1) sum (x_j - mean x)^2``), which broadcasting then adds to every entry of ``Q_c``.
    """
    x = check_embeddings(x, "x")
    if x.shape[0] == 1:
        if x.shape[1] < 2:
            raise ValueError(
                "x is a single vector of D=1: its variance over D - 1 = 0 entries is undefined"
            )
        v = x[0] - x[0].mean()
        return check_overflow((v @ v) / (x.shape[1] - 1), "x", "the variance")
    return covariance(x)


def lambda_k(k: int) -> float:
    """``lambda_k = k / (k + 1)`` (eq. 5.2): 1/2 for k = 1, 5/6 for k = 5."""
    k = check_positive_int(k, "k")
    return k / (k + 1)


class MahalanobisClassifier:
    """Simple CNAPS' regularised Mahalanobis nearest-class-mean classifier (eqs. 5.1-5.2).

    Args:
        shrinkage: ``"auto"`` (``lambda = k_c / (k_c + 1)`` per class, the thesis) or a float in
            ``[0, 1]`` used for every class.
        one_shot: ``"zero"`` (``Sigma_c = 0`` for a single support vector; default) or
            ``"simplecnaps"`` (the public code's scalar quirk, see the module docstring).
        identity_scale: coefficient of ``I`` in ``Q_c`` (1 in the thesis); must be > 0 unless the
            covariances are invertible.
        half: keep the 1/2 of eq. 5.1 in the logits ``-d(x, c)`` (the code omits it).
        dtype: precision of the fit (float64 by default: ``Q_c`` is inverted).

    After :meth:`fit`: ``classes (C,)``, ``means (C, D)``, ``precisions (C, D, D)`` (=
    ``Q_c^{-1}``), ``counts (C,)``.
    """

    def __init__(
        self,
        *,
        shrinkage: str | float = "auto",
        one_shot: str = "zero",
        identity_scale: float = 1.0,
        half: bool = True,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if shrinkage != "auto" and not (
            isinstance(shrinkage, (int, float)) and 0.0 <= float(shrinkage) <= 1.0
        ):
            raise ValueError(f"shrinkage must be 'auto' or a float in [0, 1], got {shrinkage!r}")
        if one_shot not in ("zero", "simplecnaps"):
            raise ValueError(f"one_shot must be 'zero' or 'simplecnaps', got {one_shot!r}")
        identity_scale = check_float(identity_scale, "identity_scale", low=0.0)
        self.shrinkage, self.one_shot = shrinkage, one_shot
        self.identity_scale, self.half, self.dtype = identity_scale, bool(half), dtype

    def regularized_covariances(
        self, support: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(classes (C,), means (C, D), Q (C, D, D), counts (C,))`` of eq. 5.2."""
        x = check_embeddings(support, "support").to(self.dtype)
        y = check_labels(labels, x.shape[0], "labels").to(x.device)
        if y.ndim != 1:
            raise ValueError(f"labels must have shape (n,), got {tuple(y.shape)}")
        if x.shape[0] < 2:
            raise ValueError(
                "support needs at least 2 vectors (the task covariance is undefined otherwise)"
            )
        classes = torch.unique(y)
        d = x.shape[1]
        task = covariance(x)
        eye = torch.eye(d, dtype=x.dtype, device=x.device) * self.identity_scale
        means, qs, counts = [], [], []
        for c in classes:
            xc = x[y == c]
            kc = xc.shape[0]
            lam = kc / (kc + 1) if self.shrinkage == "auto" else float(self.shrinkage)
            if self.one_shot == "simplecnaps":
                cov_c = simplecnaps_estimate_cov(xc)
            elif kc == 1:  # the documented one-shot rule Sigma_c = 0 (one_shot="zero")
                cov_c = torch.zeros_like(task)
            else:
                cov_c = covariance(xc)
            qs.append(lam * cov_c + (1 - lam) * task + eye)
            means.append(xc.mean(0))
            counts.append(kc)
        return classes, torch.stack(means), torch.stack(qs), torch.tensor(counts)

    def fit(self, support: torch.Tensor, labels: torch.Tensor) -> MahalanobisClassifier:
        """Class means and precisions ``Q_c^{-1}`` from ``support (n, D)`` and ``labels (n,)``.

        Raises:
            ValueError: bad shapes, NaN, fewer than 2 support vectors, or a singular ``Q_c``
                (``identity_scale = 0`` with too few supports).
        """
        self.classes, self.means, q, self.counts = self.regularized_covariances(support, labels)
        chol, info = torch.linalg.cholesky_ex(q)
        singular = bool((info > 0).any())
        if not singular and self.identity_scale == 0:  # Q_c >= identity_scale * I otherwise
            ev = torch.linalg.eigvalsh(q)
            singular = bool((ev[:, 0] <= 1e-10 * ev[:, -1].clamp_min(1e-300)).any())
        if singular:
            raise ValueError(
                "a regularised class covariance Q_c is not positive definite; use identity_scale > "
                "0"
            )
        self.precisions = torch.cholesky_inverse(chol)
        return self

    def logits(self, queries: torch.Tensor, *, chunk_size: int = 1024) -> torch.Tensor:
        """``-d(x, c)`` for every query and class: ``(Q, D)`` -> ``(Q, C)`` (columns follow
        ``classes``)."""
        if not hasattr(self, "means"):
            raise RuntimeError("call fit() first")
        x = check_embeddings(queries, "queries").to(self.dtype).to(self.means.device)
        if x.shape[1] != self.means.shape[1]:
            raise ValueError(
                f"queries have D={x.shape[1]} but the support has D={self.means.shape[1]}"
            )
        out = []
        for a in range(0, x.shape[0], chunk_size):
            diff = (x[a : a + chunk_size, None, :] - self.means[None]).transpose(0, 1)  # (C, q, D)
            quad = (torch.bmm(diff, self.precisions) * diff).sum(2).T  # (q, C)
            out.append(-(0.5 if self.half else 1.0) * quad)
        return torch.cat(out)

    def predict(self, queries: torch.Tensor) -> torch.Tensor:
        """``(Q,)`` predicted class ids (``argmin_c d(x, c)``)."""
        return self.classes[self.logits(queries).argmax(1)]


def mahalanobis_logits(
    queries: torch.Tensor, support: torch.Tensor, support_labels: torch.Tensor, **kwargs: object
) -> tuple[torch.Tensor, torch.Tensor]:
    """Functional :class:`MahalanobisClassifier`: ``(classes (C,), logits (Q, C))``; kwargs as the
    class."""
    s = check_embeddings(support, "support")
    y = check_labels(support_labels, s.shape[0], "support_labels")
    if y.ndim != 1:
        raise ValueError(f"support_labels must have shape (n,), got {tuple(y.shape)}")
    clf = MahalanobisClassifier(**kwargs).fit(s, y)  # type: ignore[arg-type]
    return clf.classes, clf.logits(queries)


def nearest_mean_logits(
    queries: torch.Tensor,
    support: torch.Tensor,
    support_labels: torch.Tensor,
    *,
    metric: str = "euclidean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Prototype (nearest class mean) classifier: ``(classes (C,), logits (Q, C))``.

    ``metric="euclidean"``: logits ``-1/2 ||x - mu_c||^2`` (the Mahalanobis rule with ``Q_c = I``);
    ``"cosine"``: cosine similarity to the L2-normalised class means.

    Raises:
        ValueError: bad shapes or labels, an unknown ``metric``, squared distances that overflow
            the dtype (``queries/support`` too large to compare).
    """
    x = check_embeddings(queries, "queries")
    s = check_embeddings(support, "support").to(x.dtype).to(x.device)
    y = check_labels(support_labels, s.shape[0], "support_labels").to(x.device)
    if s.shape[1] != x.shape[1]:
        raise ValueError(f"queries have D={x.shape[1]} but the support has D={s.shape[1]}")
    classes, inv = torch.unique(y, return_inverse=True)
    means = torch.zeros(classes.shape[0], s.shape[1], dtype=s.dtype, device=s.device).index_add_(
        0, inv, s
    )
    means = means / torch.bincount(inv, minlength=classes.shape[0]).to(s.dtype)[:, None]
    if metric == "euclidean":
        return classes, check_overflow(
            -0.5 * torch.cdist(x, means).pow(2), "queries/support", "the squared distances"
        )
    if metric == "cosine":
        return classes, unit_rows(x, dim=1) @ unit_rows(means, dim=1).T
    raise ValueError(f"metric must be 'euclidean' or 'cosine', got {metric!r}")
