"""The loss registry (rank_lab.losses.registry): every registered loss runs the common call, both
ways (2 and 4 arguments) and on every device present; its metadata matches the constructors and the
built losses; adding a loss is one class with one decorator."""

from __future__ import annotations

import inspect

import pytest
import torch

import rank_lab.losses as L
from rank_lab.losses import (
    LOSSES,
    build_loss,
    list_losses,
    loss_info,
    register_loss,
    unregister_loss,
)
from rank_lab.losses.base import MetricLoss, RankLoss
from rank_lab.ranking import SigmoidStep

N_CLASSES, DIM = 8, 16
#: constructor arguments beyond the registry's ``needs`` (CSL: the number of label levels; Σ: its
#: base)
EXTRA = {"csl": {"n_levels": 3}, "sigma": {"base": "sup_ap", "n_levels": 3}}
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.cuda,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
        ],
    ),
]


def _build(name: str) -> torch.nn.Module:
    info = loss_info(name)
    facts = {"n_classes": N_CLASSES, "dim": DIM}
    return build_loss(name, **{k: facts[k] for k in info.needs}, **EXTRA.get(name, {}))


def _labels(fine: torch.Tensor, hierarchical: bool) -> torch.Tensor:
    return torch.stack([fine, fine // 2, fine // 4], 1) if hierarchical else fine


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list_losses())
def test_every_registered_loss_takes_both_calls_and_backpropagates(name: str, device: str) -> None:
    torch.manual_seed(0)
    info = loss_info(name)
    fine = torch.arange(N_CLASSES).repeat_interleave(4)
    labels = _labels(fine, info.hierarchical).to(device)
    emb = torch.randn(len(fine), DIM, device=device, requires_grad=True)
    # a reference set, e.g. a cross-batch memory
    refs = torch.randn(2 * len(fine), DIM, device=device)
    ref_labels = _labels(fine.repeat(2), info.hierarchical).to(device)
    loss = _build(name).to(device)
    for args in ((emb, labels), (emb, labels, refs, ref_labels)):
        emb.grad = None
        value = loss(*args)
        assert value.ndim == 0 and torch.isfinite(value), f"{name} with {len(args)} arguments"
        value.backward()
        assert emb.grad is not None and torch.isfinite(emb.grad).all() and emb.grad.abs().sum() > 0
    # the memory call: the refs hold the queries' own copies at known slots
    own = torch.cat([emb.detach(), refs])
    value = loss(
        emb,
        labels,
        own,
        torch.cat([labels, ref_labels]),
        ref_self_index=torch.arange(len(fine), device=device),
    )
    assert torch.isfinite(value)


@pytest.mark.parametrize("name", list_losses())
def test_metadata_matches_the_constructor_and_the_built_loss(name: str) -> None:
    info = loss_info(name)
    # tests may read signatures; callers read the registry
    params = inspect.signature(info.build).parameters
    assert set(info.needs) == {"n_classes", "dim"} & set(params), name
    loss = _build(name)
    assert getattr(loss, "uses_references", True) == info.uses_references or name == "sigma", name
    assert info.preset == (not inspect.isclass(info.build) and name != "sigma"), name
    assert info.summary, f"{name} has no docstring"
    # a binary loss reads one label column (hierarchy_level 0); a hierarchical one uses them all
    torch.manual_seed(1)
    emb, fine = torch.randn(32, DIM), torch.arange(N_CLASSES).repeat_interleave(4)
    with_levels = loss(emb, _labels(fine, True))
    if not info.hierarchical:
        torch.testing.assert_close(with_levels, loss(emb, fine))
    else:
        try:
            fine_only = loss(emb, fine)
        except ValueError:
            return  # needs (B, L) labels
        assert not torch.allclose(with_levels, fine_only), name


@pytest.mark.parametrize("name", list_losses())
def test_every_registered_loss_is_on_the_loss_base_class(name: str) -> None:
    """One way per family: every registered loss (and every preset it builds) is a
    :class:`~rank_lab.losses.base.MetricLoss` with its common call and attributes."""
    loss = _build(name)
    assert isinstance(loss, MetricLoss), type(loss).__name__
    params = list(inspect.signature(loss.forward).parameters)
    assert params[:4] == ["embeddings", "labels", "ref_embeddings", "ref_labels"], params
    assert isinstance(loss.uses_references, bool) and isinstance(loss.normalize, bool)


def test_names_and_listing() -> None:
    assert {
        "smooth_ap",
        "sup_ap",
        "smooth_recall",
        "roadmap_tpami",
        "happier",
        "supcon",
        "esupcon",
    } <= set(list_losses())
    assert type(build_loss("pair_dg")) is L.PairDGLoss
    assert loss_info("Sup-AP").name == "sup_ap"
    assert list_losses("*_hap") == ["smooth_hap", "sup_hap"]
    assert set(list_losses(presets=True)) == {
        "roadmap_neurips",
        "roadmap_tpami",
        "rod_recall",
        "happier",
        "happier_f",
        "rod_ndcg",
    }
    assert set(list_losses(presets=False)) | set(list_losses(presets=True)) == set(list_losses())
    assert set(LOSSES) == set(list_losses()) and LOSSES["sup_ap"] is L.SupAP
    with pytest.raises(TypeError):
        LOSSES["x"] = L.SupAP  # read-only


def test_unknown_names_and_bad_arguments_are_clear() -> None:
    with pytest.raises(ValueError, match="unknown loss name 'no_such_loss'; known: .*'smooth_ap'"):
        build_loss("no_such_loss")
    with pytest.raises(TypeError, match="name must be a str"):
        build_loss(3)
    with pytest.raises(ValueError, match="bad arguments for loss 'smooth_ap'"):
        build_loss("smooth_ap", bogus=1)
    with pytest.raises(ValueError, match="n_classes"):
        build_loss("roadmap_tpami")  # a preset with a proxy loss needs the training-set facts


def test_adding_a_loss_is_one_class_with_one_decorator() -> None:
    @register_loss("throwaway_sigmoid_ap")
    class ThrowawayAP(RankLoss):
        """A throwaway rank loss: 1 - the smooth AP of the in-batch positives (a test double)."""

        def per_query(self, scores, relevance, valid):  # noqa: ANN001, ANN201
            return L.SmoothAP(tau=0.1).per_query(scores, relevance, valid)

    try:
        assert "throwaway_sigmoid_ap" in list_losses()
        loss = build_loss("THROWAWAY-SIGMOID-AP", reduction="sum")
        assert isinstance(loss, ThrowawayAP) and loss.reduction == "sum"
        emb, labels = torch.randn(12, 4), torch.arange(3).repeat(4)
        expect = L.SmoothAP(tau=0.1, reduction="sum")(emb, labels)
        torch.testing.assert_close(loss(emb, labels), expect)
        torch.testing.assert_close(
            loss(emb, labels, emb, labels, ref_self_index=torch.arange(12)), expect
        )
        with pytest.raises(ValueError, match="already registered"):
            register_loss("throwaway_sigmoid_ap")(ThrowawayAP)
    finally:
        info = unregister_loss("throwaway_sigmoid_ap")
    assert info.build is ThrowawayAP
    assert "throwaway_sigmoid_ap" not in list_losses() and "throwaway_sigmoid_ap" not in LOSSES
    with pytest.raises(ValueError, match="unknown loss name"):
        unregister_loss("throwaway_sigmoid_ap")


def test_register_loss_refuses_bad_metadata() -> None:
    with pytest.raises(ValueError, match="needs must hold names among"):
        register_loss("throwaway_bad", needs=("classes",))
    with pytest.raises(ValueError, match="already registered"):
        register_loss("sup-ap")
    with pytest.raises(TypeError, match="decorates a class or a factory"):
        register_loss("throwaway_bad")(SigmoidStep(0.1).tau)
    assert "throwaway_bad" not in list_losses()
