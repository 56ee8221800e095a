"""Deprecated module: its names moved by concept.

* losses -> :mod:`rank_lab.losses.supcon` (``nt_xent_loss``, ``supcon_loss``, ``SupConLoss``,
  ``SimCLRLoss``), :mod:`rank_lab.losses.esupcon` (``esupcon_loss``, ``ESupConLoss``, ...) and
  :mod:`rank_lab.losses.contrastive` (``cross_entropy_loss``, ``spce_loss``, ``tightness_loss``, ...);
* the cosine classifier head -> :mod:`rank_lab.models.heads` (``PrototypeClassifier``,
  ``prototype_logits``, ``class_means``);
* the training-set protocols -> :mod:`rank_lab.data.perturbations` (``imbalanced_indices``,
  ``noisy_labels``, ``two_views``).

``from rank_lab.losses.contrastive_cls import X`` still works and emits a ``DeprecationWarning``
naming the new home.
"""

from __future__ import annotations

from rank_lab._deprecation import moved_names

__all__: list[str] = []

_LOSSES = {
    "rank_lab.losses.supcon": ("nt_xent_loss", "supcon_loss", "SupConLoss", "SimCLRLoss"),
    "rank_lab.losses.contrastive": ("cross_entropy_loss", "spce_logits", "spce_loss", "tightness_loss"),
    "rank_lab.losses.esupcon": ("esupcon_terms", "esupcon_loss", "smooth_max_ce_supcon", "ESupConLoss"),
}
_MOVES = {
    **{name: home for home, names in _LOSSES.items() for name in names},
    **{name: "rank_lab.models.heads" for name in ("PrototypeClassifier", "prototype_logits", "class_means")},
    **{name: "rank_lab.data.perturbations" for name in ("imbalanced_indices", "noisy_labels", "two_views")},
}

__getattr__ = moved_names(__name__, _MOVES)
