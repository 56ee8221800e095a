"""Deprecated module: the RS@k training recipes moved to :mod:`rank_lab.train.recipes`.

A recipe (optimiser, schedule, sampler) is training, not a loss:
``RecallRecipe`` keeps its name; ``RECALL_PRESETS`` is ``RECALL_RECIPES``, ``get_recall_preset``
is ``get_recall_recipe`` and ``list_recall_presets`` is ``list_recall_recipes``; the fields
``tau1`` / ``tau2`` are ``tau_star`` / ``tau``. The old names still work here, with a
``DeprecationWarning``.
"""

from __future__ import annotations

from rank_lab._deprecation import moved_names

__all__: list[str] = []

__getattr__ = moved_names(__name__, {
    "RecallRecipe": "rank_lab.train.recipes",
    "RECALL_PRESETS": "rank_lab.train.recipes:RECALL_RECIPES",
    "get_recall_preset": "rank_lab.train.recipes:get_recall_recipe",
    "list_recall_presets": "rank_lab.train.recipes:list_recall_recipes",
})
