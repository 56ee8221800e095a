"""Matrix entries of :mod:`rank_lab.learned`."""

from __future__ import annotations

import torch

import rank_lab.learned as LE
import rank_lab.learned.box_images as BI_
import rank_lab.learned.boxes as LB
import rank_lab.learned.edit_task as LT
import rank_lab.learned.feds as LF
import rank_lab.learned.proxy_training as LP
import rank_lab.learned.recognizer as LR
import rank_lab.learned.render as LW
import rank_lab.learned.surrogate_model as LS_
from rank_lab.engine import EngineConfig

from .factories import emb, gen
from .framework import cls, fn

ABC = LE.Alphabet("abc")


def words_task():
    images, words = LE.make_word_dataset(
        8, alphabet="abc", min_len=1, max_len=3, height=16, width=40, seed=0
    )
    return dict(images=images, words=words, alphabet=ABC, batch_size=4, device="cpu")


def box_task():
    images, boxes = LE.make_box_dataset(16, size=16, seed=0)
    return dict(
        images=images,
        boxes=boxes,
        batch_size=4,
        bank=LE.RotatedBoxPairBank(boxes, size=64, seed=0),
        device="cpu",
    )


def e_pair():
    return {"e_hat": torch.tensor([0.1, 1.2, 2.0]), "e_true": torch.tensor([0.0, 1.0, 3.0])}


def sur():
    return LE.EmbeddingSurrogate(LE.BoxMLP(hidden=(8, 8, 8, 8), out_dim=4))


def crnn():
    return LE.CRNN(ABC.n_classes, channels=(4, 8, 8), hidden=8)


LS = dict(epochs=1, surrogate_steps=1, model_steps=1)
E_INT = {
    "e_true:int": (
        "integer metric values (edit distances) are cast to the surrogate's dtype (documented)"
    )
}


def box_data(n: int = 4):
    images, boxes = LE.make_box_dataset(n, size=16, seed=0)
    return {"model": LE.BoxRegressor(16, (4, 4, 4), 8), "images": images, "boxes": boxes}


def tracking_data():
    """A regressor whose predictions overlap the true boxes (its output bias is their mean code), so
    that 1 - IoU varies across the images and the correlations are defined."""
    data = box_data(16)
    head = [m for m in data["model"].modules() if isinstance(m, torch.nn.Linear)][-1]
    with torch.no_grad():
        head.weight.mul_(0.01)
        head.bias.copy_(LB.encode_box6(data["boxes"]).float().mean(0))
    return {**data, "surrogate": sur()}


def word_data():
    t = words_task()
    return {"model": crnn(), "images": t["images"], "words": t["words"], "alphabet": ABC}


def proxy():
    model = torch.nn.Linear(3, 1)
    x = emb(6, 3)
    return {
        "model": model,
        "n_items": 6,
        "batch_loss": lambda idx, dev: model(x[idx]).pow(2).mean(),
        "steps": 2,
        "batch_size": 3,
        "lr": 1e-2,
        "device": "cpu",
        "engine": EngineConfig(grad_clip=1.0),
    }


def ctc_args():
    return {
        "logits": torch.randn(2, 6, 4, generator=gen(3)),
        "targets": torch.tensor([[1, 2], [3, -1]]),
        "target_lengths": torch.tensor([2, 1]),
    }


ENTRIES = [
    fn(
        LE.feds_filter,
        e_pair,
        {"e_hat": "x", "e_true": "x", "lam": "pos"},
        rows=(("e_hat", "e_true"),),
        legal={
            "e_true:int": "integer edit distances",
            "lam:inf": "lambda = inf switches the filter off (documented)",
        },
    ),
    fn(
        LE.feds_loss,
        e_pair,
        {"e_hat": "x", "e_true": "x", "lam": "pos", "mode": "choice"},
        rows=(("e_hat", "e_true"),),
        legal={
            "e_true:int": "integer edit distances",
            "lam:inf": "lambda = inf switches the filter off (documented)",
        },
    ),
    fn(
        LE.FEDSConfig,
        LS,
        {"epochs": "posint", "lam": "pos", "mode": "choice"},
        legal={"lam:inf": "lambda = inf: no filter (documented)"},
    ),
    fn(
        LE.LSConfig,
        LS,
        {
            "epochs": "posint",
            "surrogate_lr": "pos",
            "model_lr": "pos",
            "source": "choice",
            "grad_penalty": "nonneg",
        },
    ),
    cls(
        LE.Alphabet,
        {"chars": "abc"},
        calls=[("encode", {"words": ["ab", "c"]}, None)],
        extra={"outside": ("encode.words", lambda: ["abz"], ("words",))},
    ),
    cls(
        LE.CRNN,
        {"n_classes": 4, "channels": (4, 8, 8), "hidden": 8},
        {"n_classes": "posint", "hidden": "posint"},
        calls=[("__call__", lambda: {"x": torch.rand(2, 1, 16, 40)}, {"x": "x"})],
    ),
    fn(
        LE.greedy_decode,
        lambda: {"scores": torch.rand(2, 5, 4), "alphabet": ABC},
        {"scores": "x"},
        extra={"classes": ("scores", lambda: torch.rand(2, 5, 9), ("scores",))},
    ),
    fn(
        LE.ctc_best_path,
        lambda: {
            "log_probs": torch.rand(2, 6, 4).log_softmax(-1),
            "targets": torch.tensor([[1, 2], [3, -1]]),
            "target_lengths": torch.tensor([2, 1]),
        },
        {"log_probs": "x"},
        rows=(("log_probs", "targets"),),
    ),
    fn(
        LE.fit_ctc,
        lambda: {
            "model": crnn(),
            **{k: v for k, v in words_task().items() if k in ("images", "words", "alphabet")},
            "steps": 2,
            "batch_size": 4,
            "device": "cpu",
        },
        {
            "images": "x",
            "steps": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "schedule": "choice",
        },
        rows=(("images", "words"),),
    ),
    cls(
        LE.WordRenderer,
        {"height": 16, "width": 40},
        {"height": "posint", "width": "posint", "noise": "nonneg", "blur": "nonneg"},
    ),
    fn(
        LE.make_word_dataset,
        {"n": 4, "alphabet": "abc", "height": 16, "width": 40},
        {"n": "posint", "min_len": "posint", "height": "posint"},
    ),
    cls(
        LE.CTCEditPairGenerator,
        {"n_chars": 3, "frames": 6, "max_len": 3},
        {"n_chars": "posint", "frames": "posint", "max_len": "posint", "soften": "prob"},
    ),
    cls(
        LE.EditDistanceTask,
        words_task,
        {"images": "x", "batch_size": "posint"},
        rows=(("images", "words"),),
    ),
    cls(
        LE.BoxIoUTask,
        box_task,
        {"images": "x", "boxes": "x", "batch_size": "posint"},
        rows=(("images", "boxes"),),
    ),
    cls(
        LE.BoxRegressor,
        {"size": 16, "channels": (4, 4, 4), "hidden": 8},
        {"size": "posint", "hidden": "posint"},
        calls=[("__call__", lambda: {"x": torch.rand(2, 1, 16, 16)}, {"x": "x"})],
    ),
    cls(
        LE.RotatedBoxPairBank,
        lambda: {"gt_boxes": LE.make_box_dataset(8, size=16, seed=0)[1], "size": 32},
        {"gt_boxes": "x", "size": "posint", "n_bins": "posint"},
    ),
    fn(LE.make_box_dataset, {"n": 4, "size": 16}, {"n": "posint", "size": "posint"}),
    cls(
        LE.BoxMLP,
        {"hidden": (8, 8, 8, 8), "out_dim": 4},
        {"in_dim": "posint", "out_dim": "posint"},
        calls=[("__call__", lambda: {"x": emb(3, 6)}, {"x": "x"})],
    ),
    cls(
        LE.CharCNN,
        {
            "n_classes": 4,
            "length": 8,
            "channels": 4,
            "hidden": 8,
            "out_dim": 4,
            "kernel_sizes": (3, 3, 3, 3, 3),
            "pool_after": (0,),
        },
        {"n_classes": "posint", "length": "posint", "channels": "posint"},
        calls=[("__call__", lambda: {"x": torch.rand(2, 8, 4)}, {"x": "x"})],
    ),
    cls(
        LE.EmbeddingSurrogate,
        lambda: {"embedding": LE.BoxMLP(hidden=(8, 8, 8, 8), out_dim=4)},
        {"eps": "pos"},
        calls=[
            ("__call__", lambda: {"z": emb(3, 6), "y": emb(3, 6, seed=1)}, {"z": "x", "y": "x"})
        ],
        rows=(("__call__.z", "__call__.y"),),
    ),
    fn(
        LE.surrogate_loss,
        lambda: {
            "surrogate": sur(),
            "z": emb(3, 6),
            "y": emb(3, 6, seed=1),
            "e_true": torch.rand(3),
        },
        {
            "z": "x",
            "y": "x",
            "e_true": "x",
            "grad_penalty": "nonneg",
            "fit_weight": "pos",
            "eps": "pos",
        },
        rows=(("z", "y"), ("z", "e_true")),
        legal=E_INT,
    ),
    fn(
        LE.evaluate_surrogate,
        lambda: {
            "model": None,
            "surrogate": sur(),
            "task": LE.BoxIoUTask(**box_task()),
            "source": "global",
            "n_batches": 1,
        },
        {"source": "choice", "n_batches": "posint"},
    ),
    cls(
        LE.SurrogateTrainer,
        lambda: {
            "model": LE.BoxRegressor(16, (4, 4, 4), 8),
            "surrogate": sur(),
            "task": LE.BoxIoUTask(**box_task()),
            "config": LE.LSConfig(**LS),
            "device": "cpu",
        },
        calls=[("fit", None, None)],
    ),
    cls(
        LE.FEDSTrainer,
        lambda: {
            "model": LE.BoxRegressor(16, (4, 4, 4), 8),
            "surrogate": sur(),
            "task": LE.BoxIoUTask(**box_task()),
            "config": LE.FEDSConfig(**LS),
            "device": "cpu",
        },
        calls=[("fit", None, None)],
    ),
    fn(
        LF.feds_mask,
        e_pair,
        {"e_hat": "x", "e_true": "x", "lam": "pos"},
        rows=(("e_hat", "e_true"),),
        legal={
            "e_true:int": "integer edit distances",
            "lam:inf": "lambda = inf switches the filter off (documented)",
        },
    ),
    cls(LS_.SurrogateTask, {"batch_size": 4, "device": "cpu"}, {"batch_size": "posint"}),
    fn(
        LS_.ls_model_loss,
        e_pair,
        {"e_hat": "x", "e_true": "x"},
        rows=(("e_hat", "e_true"),),
        legal={
            "e_true:int": "integer metric values (edit distances); e_true only sets the batch size"
        },
    ),
    fn(
        LR.ctc_collapse,
        lambda: {"paths": torch.tensor([[0, 1, 1, 0, 2], [3, 3, 0, 3, 0]])},
        {"paths": "labels"},
    ),
    fn(LR.ctc_loss, ctc_args, {"logits": "x"}, rows=(("logits", "targets"),)),
    fn(
        LP.lr_schedule,
        lambda: {
            "opt": torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1),
            "steps": 4,
            "schedule": "cosine",
        },
        {"steps": "posint", "schedule": "choice"},
        extra={"not_optimizer": ("opt", lambda: 3, ("opt",))},
    ),
    fn(
        LP.fit_proxy,
        proxy,
        {
            "n_items": "posint",
            "steps": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "schedule": "choice",
        },
        extra={
            "not_callable": ("batch_loss", lambda: 3, ("batch_loss",)),
            "not_engine": ("engine", lambda: {"grad_clip": 1.0}, ("engine",)),
            "engine_epochs": ("engine", lambda: EngineConfig(epochs=7), ("engine",)),
        },
    ),
    fn(
        LR.recognize,
        lambda: {k: v for k, v in word_data().items() if k != "words"} | {"batch_size": 4},
        {"images": "x", "batch_size": "posint"},
    ),
    fn(
        LR.evaluate_recognizer,
        word_data,
        {"images": "x"},
        rows=(("images", "words"),),
        extra={"not_words": ("words", lambda: "abc", ("words",))},
    ),
    fn(
        LW.font_paths,
        {"names": LW.DEFAULT_FONTS},
        extra={"single_str": ("names", lambda: "DejaVuSans.ttf", ("names",))},
    ),
    fn(
        LW.random_words,
        {"n": 3, "alphabet": "abc"},
        {"n": "posint", "min_len": "posint", "max_len": "posint"},
        extra={"empty": ("alphabet", lambda: "", ("alphabet",))},
    ),
    fn(
        LT.random_ctc_path,
        lambda: {
            "words": torch.tensor([[1, 2, 0], [3, 1, 2]]),
            "lengths": torch.tensor([2, 3]),
            "frames": 8,
            "gen": gen(),
        },
        {"words": "labels", "frames": "posint"},
        rows=(("words", "lengths"),),
    ),
    fn(
        BI_.sample_rotated_boxes,
        lambda: {"n": 3, "gen": gen(), "width": (0.35, 0.75)},
        {"n": "posint", "max_angle": "nonneg"},
        extra={
            "reversed": ("width", lambda: (0.7, 0.3), ("width",)),
            "not_generator": ("gen", lambda: 0, ("gen",)),
        },
    ),
    fn(
        BI_.render_box_images,
        lambda: {"boxes": LE.make_box_dataset(2, size=8, seed=0)[1], "size": 8},
        {"boxes": "x", "size": "posint", "noise": "nonneg", "supersample": "posint"},
    ),
    fn(
        LB.perturb_boxes,
        lambda: {"boxes": LE.make_box_dataset(3, size=8, seed=0)[1], "gen": gen()},
        {"boxes": "x", "center": "nonneg", "log_scale": "nonneg", "angle": "nonneg"},
    ),
    fn(
        LB.fit_box_regressor,
        lambda: {**box_data(), "steps": 2, "batch_size": 2, "device": "cpu"},
        {
            "images": "x",
            "boxes": "x",
            "steps": "posint",
            "batch_size": "posint",
            "lr": "pos",
            "schedule": "choice",
        },
        rows=(("images", "boxes"),),
    ),
    fn(
        LB.predict_boxes,
        lambda: {k: v for k, v in box_data().items() if k != "boxes"} | {"batch_size": 2},
        {"images": "x", "batch_size": "posint"},
    ),
    fn(
        LB.metric_tracking,
        tracking_data,
        {"images": "x", "boxes": "x"},
        rows=(("images", "boxes"),),
        extra={"one": ("images", lambda: LE.make_box_dataset(1, size=16, seed=0)[0], ("images",))},
    ),
    fn(
        LB.evaluate_box_regressor,
        box_data,
        {"images": "x", "boxes": "x"},
        rows=(("images", "boxes"),),
    ),
]
