"""Matrix entries of :mod:`rank_lab.learned`."""

from __future__ import annotations

import torch

import rank_lab.learned as LE

from .factories import emb
from .framework import cls, fn

ABC = LE.Alphabet("abc")


def words_task():
    images, words = LE.make_word_dataset(8, alphabet="abc", min_len=1, max_len=3, height=16, width=40, seed=0)
    return dict(images=images, words=words, alphabet=ABC, batch_size=4, device="cpu")


def box_task():
    images, boxes = LE.make_box_dataset(16, size=16, seed=0)
    return dict(images=images, boxes=boxes, batch_size=4, bank=LE.RotatedBoxPairBank(boxes, size=64, seed=0), device="cpu")


def e_pair():
    return {"e_hat": torch.tensor([0.1, 1.2, 2.0]), "e_true": torch.tensor([0.0, 1.0, 3.0])}


def sur():
    return LE.EmbeddingSurrogate(LE.BoxMLP(hidden=(8, 8, 8, 8), out_dim=4))


def crnn():
    return LE.CRNN(ABC.n_classes, channels=(4, 8, 8), hidden=8)


LS = dict(epochs=1, surrogate_steps=1, model_steps=1)

ENTRIES = [
    fn(LE.feds_filter, e_pair, {"e_hat": "x", "e_true": "x", "lam": "pos"}, rows=(("e_hat", "e_true"),),
       legal={"e_true:int": "integer edit distances", "lam:inf": "lambda = inf switches the filter off (documented)"}),
    fn(LE.feds_loss, e_pair, {"e_hat": "x", "e_true": "x", "lam": "pos", "mode": "choice"}, rows=(("e_hat", "e_true"),),
       legal={"e_true:int": "integer edit distances", "lam:inf": "lambda = inf switches the filter off (documented)"}),
    fn(LE.FEDSConfig, LS, {"epochs": "posint", "lam": "pos", "mode": "choice"}, legal={"lam:inf": "lambda = inf: no filter (documented)"}),
    fn(LE.LSConfig, LS, {"epochs": "posint", "surrogate_lr": "pos", "model_lr": "pos", "source": "choice", "grad_penalty": "nonneg"}),
    cls(LE.Alphabet, {"chars": "abc"}, calls=[("encode", {"words": ["ab", "c"]}, None)],
        extra={"outside": ("encode.words", lambda: ["abz"], ("words",))}),
    cls(LE.CRNN, {"n_classes": 4, "channels": (4, 8, 8), "hidden": 8}, {"n_classes": "posint", "hidden": "posint"},
        calls=[("__call__", lambda: {"x": torch.rand(2, 1, 16, 40)}, {"x": "x"})]),
    fn(LE.greedy_decode, lambda: {"scores": torch.rand(2, 5, 4), "alphabet": ABC}, {"scores": "x"},
       extra={"classes": ("scores", lambda: torch.rand(2, 5, 9), ("scores",))}),
    fn(LE.ctc_best_path, lambda: {"log_probs": torch.rand(2, 6, 4).log_softmax(-1), "targets": torch.tensor([[1, 2], [3, -1]]),
                                  "target_lengths": torch.tensor([2, 1])}, {"log_probs": "x"}, rows=(("log_probs", "targets"),)),
    fn(LE.fit_ctc, lambda: {"model": crnn(), **{k: v for k, v in words_task().items() if k in ("images", "words", "alphabet")},
                            "steps": 2, "batch_size": 4, "device": "cpu"},
       {"images": "x", "steps": "posint", "batch_size": "posint", "lr": "pos", "schedule": "choice"}, rows=(("images", "words"),)),
    cls(LE.WordRenderer, {"height": 16, "width": 40}, {"height": "posint", "width": "posint", "noise": "nonneg", "blur": "nonneg"}),
    fn(LE.make_word_dataset, {"n": 4, "alphabet": "abc", "height": 16, "width": 40}, {"n": "posint", "min_len": "posint",
                                                                                      "height": "posint"}),
    cls(LE.CTCEditPairGenerator, {"n_chars": 3, "frames": 6, "max_len": 3}, {"n_chars": "posint", "frames": "posint", "max_len": "posint",
                                                                             "soften": "prob"}),
    cls(LE.EditDistanceTask, words_task, {"images": "x", "batch_size": "posint"}, rows=(("images", "words"),)),
    cls(LE.BoxIoUTask, box_task, {"images": "x", "boxes": "x", "batch_size": "posint"}, rows=(("images", "boxes"),)),
    cls(LE.BoxRegressor, {"size": 16, "channels": (4, 4, 4), "hidden": 8}, {"size": "posint", "hidden": "posint"},
        calls=[("__call__", lambda: {"x": torch.rand(2, 1, 16, 16)}, {"x": "x"})]),
    cls(LE.RotatedBoxPairBank, lambda: {"gt_boxes": LE.make_box_dataset(8, size=16, seed=0)[1], "size": 32}, {"gt_boxes": "x", "size": "posint",
                                                                                                                "n_bins": "posint"}),
    fn(LE.make_box_dataset, {"n": 4, "size": 16}, {"n": "posint", "size": "posint"}),
    cls(LE.BoxMLP, {"hidden": (8, 8, 8, 8), "out_dim": 4}, {"in_dim": "posint", "out_dim": "posint"},
        calls=[("__call__", lambda: {"x": emb(3, 6)}, {"x": "x"})]),
    cls(LE.CharCNN, {"n_classes": 4, "length": 8, "channels": 4, "hidden": 8, "out_dim": 4, "kernel_sizes": (3, 3, 3, 3, 3), "pool_after": (0,)},
        {"n_classes": "posint", "length": "posint", "channels": "posint"},
        calls=[("__call__", lambda: {"x": torch.rand(2, 8, 4)}, {"x": "x"})]),
    cls(LE.EmbeddingSurrogate, lambda: {"embedding": LE.BoxMLP(hidden=(8, 8, 8, 8), out_dim=4)}, {"eps": "pos"},
        calls=[("__call__", lambda: {"z": emb(3, 6), "y": emb(3, 6, seed=1)}, {"z": "x", "y": "x"})], rows=(("__call__.z", "__call__.y"),)),
    fn(LE.surrogate_loss, lambda: {"surrogate": sur(), "z": emb(3, 6), "y": emb(3, 6, seed=1), "e_true": torch.rand(3)},
       {"z": "x", "y": "x", "e_true": "x", "grad_penalty": "nonneg"}, rows=(("z", "y"), ("z", "e_true"))),
    fn(LE.evaluate_surrogate, lambda: {"model": None, "surrogate": sur(), "task": LE.BoxIoUTask(**box_task()), "source": "global", "n_batches": 1},
       {"source": "choice", "n_batches": "posint"}),
    cls(LE.SurrogateTrainer, lambda: {"model": LE.BoxRegressor(16, (4, 4, 4), 8), "surrogate": sur(), "task": LE.BoxIoUTask(**box_task()),
                                      "config": LE.LSConfig(**LS), "device": "cpu"}, calls=[("fit", None, None)]),
    cls(LE.FEDSTrainer, lambda: {"model": LE.BoxRegressor(16, (4, 4, 4), 8), "surrogate": sur(), "task": LE.BoxIoUTask(**box_task()),
                                 "config": LE.FEDSConfig(**LS), "device": "cpu"}, calls=[("fit", None, None)]),
]
