"""Tests for rank_lab.fewshot: FiLM extractors, rCNAPS, class-specific Smooth-AP, episodes,
setups."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rank_lab.engine import EngineConfig
from rank_lab.fewshot import (
    EpisodeSampler,
    FiLM,
    FiLMResNet,
    SetEncoder,
    adaptation_parameter_count,
    build_rcnaps,
    class_specific_smooth_ap,
    evaluate_fewshot_retrieval,
    fewshot_retrieval_scores,
    film,
    film_resnet18,
    film_tiny_resnet,
    fit_rcnaps,
    identity_film_params,
    rcnaps_describe,
    rcnaps_describe_tasks,
    sample_supports,
    select_film_params,
    setup_supports,
)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# ----------------------------------------------------------------------------- parameter counts
def test_resnet18_parameter_counts_match_the_thesis():
    model = build_rcnaps("resnet18")
    n = model.parameter_counts()
    assert n["backbone"] == 11_176_512  # "~11.2M parameters of ResNet18" (thesis §4.3.5)
    assert (
        n["adaptation"]
        == adaptation_parameter_count([64, 128, 256, 512], [2, 2, 2, 2], 64)
        == 8_448_960
    )
    # set encoder: conv(3->64) + 4 conv(64->64), each with a BN (2 x 64)
    assert n["set_encoder"] == (3 * 64 * 9 + 64 + 128) + 4 * (64 * 64 * 9 + 64 + 128) == 150_144
    assert n["added"] == 8_599_104
    assert abs(n["added"] - 8.5e6) / 8.5e6 < 0.02  # "add ~8.5M parameters"
    assert n["total"] == n["backbone"] + n["added"] + 1  # + the GeM exponent


def test_timm_and_torchvision_resnet18_agree():
    a, b = film_resnet18("torchvision"), film_resnet18("timm")
    assert a.channels == b.channels == [64, 128, 256, 512] and a.blocks == b.blocks == [2, 2, 2, 2]
    assert sum(p.numel() for p in a.parameters()) == sum(p.numel() for p in b.parameters())
    with pytest.raises(ValueError, match="source"):
        film_resnet18("keras")


def test_film_resnet_rejects_bottleneck_blocks():
    from torchvision.models import resnet50

    with pytest.raises(TypeError, match="BasicBlock"):
        FiLMResNet(resnet50(weights=None))


# ----------------------------------------------------------------------------- FiLM
def test_unadapted_film_resnet_equals_torchvision_resnet18():
    from torchvision.models import resnet18

    torch.manual_seed(0)
    ref = resnet18(weights=None).eval()
    ext = FiLMResNet(ref).eval()
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        r = ref.maxpool(ref.relu(ref.bn1(ref.conv1(x))))
        r = ref.layer4(ref.layer3(ref.layer2(ref.layer1(r))))
        out = ext(x)
        ident = ext(x, identity_film_params(ext.channels, ext.blocks))
    assert out.shape == (2, 512, 2, 2)
    torch.testing.assert_close(out, r, rtol=0, atol=0)
    torch.testing.assert_close(ident, r, rtol=1e-6, atol=1e-6)


def test_film_broadcasts_and_per_image_rows():
    x = torch.randn(3, 4, 5, 5)
    g, b = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(film(x, g, b), x * g.view(1, 4, 1, 1) + b.view(1, 4, 1, 1))
    torch.testing.assert_close(FiLM()(x, g, b), film(x, g, b))
    gb, bb = torch.randn(3, 4), torch.randn(3, 4)
    out = film(x, gb, bb)
    for i in range(3):
        torch.testing.assert_close(out[i], film(x[i : i + 1], gb[i], bb[i])[0])
    with pytest.raises(ValueError, match="shape"):
        film(x, torch.randn(5), torch.randn(5))
    with pytest.raises(ValueError, match="beta"):
        film(x, torch.randn(4), torch.randn(3))


def test_per_task_parameters_in_one_batch_equal_separate_passes():
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8, 16), encoder_width=16, encoder_depth=3).eval()
    x = torch.rand(4, 3, 16, 16)
    s1, s2 = torch.rand(2, 3, 16, 16), torch.rand(3, 3, 16, 16)
    with torch.no_grad():
        p1, p2 = model.film_params(s1), model.film_params(s2)
        stacked = [
            [{k: torch.stack([a[k], b[k]]) for k in a} for a, b in zip(st1, st2, strict=True)]
            for st1, st2 in zip(p1, p2, strict=True)
        ]
        task = torch.tensor([0, 1, 1, 0])
        both = model(x, params=select_film_params(stacked, task))
        sep1, sep2 = model(x, params=p1), model(x, params=p2)
    torch.testing.assert_close(both[task == 0], sep1[task == 0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(both[task == 1], sep2[task == 1], rtol=1e-5, atol=1e-6)


def test_identity_initialisation_of_the_adaptation_network():
    torch.manual_seed(0)
    exact = build_rcnaps(
        "tiny", widths=(8, 16), encoder_width=16, encoder_depth=3, init_std=0.0
    ).eval()
    x, s = torch.rand(3, 3, 16, 16), torch.rand(5, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(exact(x, s), exact(x), rtol=0, atol=0)
        near = build_rcnaps("tiny", widths=(8, 16), encoder_width=16, encoder_depth=3).eval()
        params = near.film_params(s)
    for stage in params:
        for blk in stage:
            assert (
                float((blk["gamma1"] - 1).abs().max()) < 0.05
                and float(blk["beta2"].abs().max()) < 0.05
            )
    # the regulariser still gets a gradient at r = 0, so an exactly-identity start can learn
    exact.train()
    loss = class_specific_smooth_ap(
        exact(torch.rand(6, 3, 16, 16), s), torch.tensor([0, 0, 0, 1, 1, 1]), 0
    )
    loss.backward()
    grads = [p.grad for n, p in exact.named_parameters() if "regularizers" in n]
    assert any(g is not None and float(g.abs().sum()) > 0 for g in grads)


def test_set_encoder_is_permutation_invariant_and_batched():
    torch.manual_seed(0)
    enc = SetEncoder(3, 16, 3).eval()
    s = torch.rand(5, 3, 16, 16)
    with torch.no_grad():
        z = enc(s)
        torch.testing.assert_close(enc(s[torch.randperm(5)]), z, rtol=1e-5, atol=1e-6)
        two = enc(torch.stack([s, s.flip(0)]))
    assert z.shape == (16,) and two.shape == (2, 16)
    torch.testing.assert_close(two[0], z, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(two[1], z, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="support"):
        enc(torch.rand(3, 16, 16))


def test_set_encoder_codes_a_support_the_same_in_training_and_evaluation():
    """Train as you test: the CNAPS code keeps its set encoder "always in train mode to process
    context data", so batch norm normalises a support with that support's own statistics, in
    training and at evaluation. With running statistics, evaluation would feed the adaptation
    network codes it never saw in training."""
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8, 16), encoder_width=16, encoder_depth=3, init_std=0.5)
    s = 0.3 + 0.5 * torch.rand(5, 3, 16, 16)
    model.train()
    with torch.no_grad():
        for _ in range(3):  # training passes on other supports
            model.film_params(torch.rand(5, 3, 16, 16))
        z_train, p_train = model.set_encoder(s), model.film_params(s)
    model.eval()
    with torch.no_grad():
        z_eval, p_eval = model.set_encoder(s), model.film_params(s)
    torch.testing.assert_close(z_eval, z_train, rtol=1e-5, atol=1e-6)
    for st_t, st_e in zip(p_train, p_eval, strict=True):
        for b_t, b_e in zip(st_t, st_e, strict=True):
            for key in b_t:
                torch.testing.assert_close(b_e[key], b_t[key], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_set_encoder_normalises_each_set_of_a_batch_by_its_own_statistics(mode):
    torch.manual_seed(0)
    enc = SetEncoder(3, 16, 3).train(mode == "train")
    s1, s2 = torch.rand(4, 3, 16, 16), 3.0 * torch.rand(4, 3, 16, 16) + 1.0
    with torch.no_grad():
        two = enc(torch.stack([s1, s2]))
        torch.testing.assert_close(two[0], enc(s1), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(two[1], enc(s2), rtol=1e-5, atol=1e-6)
    # hand check of the first block: its batch norm standardises each channel over the set
    bn_in = enc.net[0](s1)
    out = enc.net[1](bn_in)
    mu = bn_in.mean(dim=(0, 2, 3), keepdim=True)
    var = bn_in.var(dim=(0, 2, 3), unbiased=False, keepdim=True)
    torch.testing.assert_close(out, (bn_in - mu) / torch.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def test_set_encoder_refuses_a_set_without_batch_statistics():
    enc = SetEncoder(3, 8, 3)
    assert enc(torch.rand(2, 3, 4, 4)).shape == (8,)  # 4 -> 2 -> 1: two values per channel
    assert enc(torch.rand(1, 3, 8, 8)).shape == (8,)  # 8 -> 4 -> 2: four values
    with pytest.raises(ValueError, match="batch norm"):
        enc(torch.rand(1, 3, 4, 4))  # one image, 1 x 1 in the last block
    with pytest.raises(ValueError, match="batch norm"):
        enc(torch.rand(2, 1, 3, 4, 4))


def test_rcnaps_descriptors_shape_and_norm():
    model = build_rcnaps("tiny", widths=(8, 16, 32), encoder_width=16, encoder_depth=3).eval()
    with torch.no_grad():
        d = model(torch.rand(7, 3, 16, 16), torch.rand(2, 3, 16, 16))
    assert d.shape == (7, 32)
    torch.testing.assert_close(d.norm(dim=1), torch.ones(7))
    with pytest.raises(ValueError, match="not both"):
        model(torch.rand(1, 3, 16, 16), torch.rand(1, 3, 16, 16), params=[])
    with pytest.raises(ValueError, match="backbone"):
        build_rcnaps("vgg")


def test_frozen_backbone_keeps_batchnorm_in_eval_and_no_grad():
    model = build_rcnaps("tiny", widths=(8,), encoder_width=8, encoder_depth=2)
    model.train()
    assert not model.extractor.training and model.set_encoder.training
    assert all(not p.requires_grad for p in model.extractor.parameters())
    model.set_train_backbone(True)
    model.train()
    assert model.extractor.training and all(p.requires_grad for p in model.extractor.parameters())


# ----------------------------------------------------------------------------- eq. 4.13
def _brute_smooth_ap(emb: torch.Tensor, labels: torch.Tensor, q: int, tau: float) -> torch.Tensor:
    s = emb @ emb[q]
    others = [j for j in range(len(labels)) if j != q]
    pos = [j for j in others if labels[j] == labels[q]]
    terms = []
    for i in pos:
        num = 1 + sum(torch.sigmoid((s[j] - s[i]) / tau) for j in pos if j != i)
        den = 1 + sum(torch.sigmoid((s[j] - s[i]) / tau) for j in others if j != i)
        terms.append(num / den)
    return torch.stack(terms).mean()


def test_class_specific_smooth_ap_matches_eq_4_13_brute_force():
    g = torch.Generator().manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(12, 5, generator=g, dtype=torch.float64), dim=1)
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2])
    for tau in (0.01, 0.1):
        want = torch.stack(
            [1 - _brute_smooth_ap(emb, y, q, tau) for q in range(12) if y[q] == 2]
        ).mean()
        got = class_specific_smooth_ap(emb, y, 2, tau=tau)
        torch.testing.assert_close(got, want)


def test_class_specific_smooth_ap_tends_to_exact_ap():
    from rank_lab.metrics import average_precision

    g = torch.Generator().manual_seed(1)
    emb = torch.nn.functional.normalize(torch.randn(15, 4, generator=g, dtype=torch.float64), dim=1)
    y = torch.arange(3).repeat(5)
    q = torch.nonzero(y == 1).flatten()
    scores = emb[q] @ emb.T
    targets = (y[None] == 1).expand(len(q), -1).clone()
    scores[torch.arange(len(q)), q] = -10.0  # the query leaves its own list
    targets[torch.arange(len(q)), q] = False
    exact = 1 - average_precision(scores, targets).mean()
    assert abs(float(class_specific_smooth_ap(emb, y, 1, tau=1e-4)) - float(exact)) < 1e-6


def test_class_specific_loss_is_the_target_rows_of_eq_4_12():
    from rank_lab.losses import SmoothAP

    torch.manual_seed(0)
    emb = torch.nn.functional.normalize(torch.randn(9, 4, dtype=torch.float64), dim=1)
    y = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2])
    per_query = SmoothAP(tau=0.5, reduction="none")(emb, y)  # eq. 4.12 terms, every query
    for c in range(3):
        torch.testing.assert_close(
            class_specific_smooth_ap(emb, y, c, tau=0.5), per_query[y == c].mean()
        )
    assert abs(float(per_query.mean()) - float(class_specific_smooth_ap(emb, y, 0, tau=0.5))) > 1e-4
    with pytest.raises(ValueError, match="at least 2"):
        class_specific_smooth_ap(emb, y, 7)


# ----------------------------------------------------------------------------- episodes
@settings(max_examples=25, deadline=None)
@given(
    n_cls=st.integers(6, 12),
    per=st.integers(4, 12),
    k=st.integers(1, 3),
    m=st.integers(1, 4),
    n=st.integers(2, 6),
    seed=st.integers(0, 10**6),
    i=st.integers(0, 50),
)
def test_episode_sampler_invariants(n_cls, per, k, m, n, seed, i):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, per + 1, n_cls)
    labels = torch.from_numpy(
        np.concatenate([np.full(s, c) for c, s in enumerate(sizes)] + [np.full(3, -1)])
    )
    labels = labels[torch.from_numpy(rng.permutation(len(labels)))]
    try:
        sampler = EpisodeSampler(labels, k, m, n, episodes=60, seed=seed)
    except ValueError:
        assume_bad = (sizes >= k + m).sum() == 0 or (sizes >= m).sum() < n
        assert assume_bad
        return
    ep = sampler.episode(i)
    assert ep.classes[0] == ep.target and len(set(ep.classes.tolist())) == n
    assert ep.support.shape == (k,) and bool((labels[ep.support] == ep.target).all())
    assert ep.batch.shape == (n * m,) and bool((labels[ep.batch] == ep.batch_labels).all())
    assert torch.equal(ep.batch_labels, ep.classes.repeat_interleave(m))  # grouped, target first
    for c in ep.classes:
        idx = ep.batch[ep.batch_labels == c]
        assert len(set(idx.tolist())) == m  # no repeated image within a class
    assert not set(ep.support.tolist()) & set(ep.batch.tolist())  # disjoint support / batch
    assert bool((labels[ep.batch] >= 0).all())  # distractors never sampled
    again = sampler.episode(i)
    assert torch.equal(again.batch, ep.batch) and torch.equal(again.support, ep.support)


def test_episode_sampler_defaults_and_errors():
    y = torch.arange(6).repeat_interleave(15)
    ep = next(iter(EpisodeSampler(y)))
    assert (ep.support.numel(), ep.batch.numel(), ep.classes.numel()) == (5, 60, 6)  # k, N m, N
    with pytest.raises(ValueError, match="n_classes"):
        EpisodeSampler(y, n_classes=7)
    with pytest.raises(ValueError, match="target"):
        EpisodeSampler(torch.arange(6).repeat_interleave(10), k=5, m=10)
    with pytest.raises(ValueError, match="labels"):
        EpisodeSampler(torch.zeros(4, 2, dtype=torch.long))


def test_episode_sampler_groups_keep_each_episode_in_one_group():
    # two tasks over the same 24 items: copy 0 labelled by 4 "shapes", copy 1 by 3 "colours"
    shapes = torch.arange(4).repeat_interleave(6)
    colours = torch.arange(3).repeat(8)
    labels = torch.cat([shapes, colours + 4])
    groups = torch.arange(2).repeat_interleave(24)
    sampler = EpisodeSampler(labels, k=2, m=3, n_classes=3, episodes=200, seed=7, groups=groups)
    seen = set()
    for ep in sampler:
        g = groups[ep.batch]
        assert bool((g == g[0]).all()) and bool((groups[ep.support] == g[0]).all())
        assert int(groups[labels == ep.target][0]) == int(g[0])
        seen.add(int(g[0]))
    assert seen == {0, 1}  # both tasks are drawn
    counts = [
        sum(int(groups[sampler.episode(i).batch[0]]) == g for i in range(200)) for g in (0, 1)
    ]
    assert min(counts) > 60  # each group about half of the episodes (binomial 200, 1/2)
    # one group draws exactly the episodes of no group
    one = EpisodeSampler(
        shapes, k=2, m=3, n_classes=3, episodes=5, seed=3, groups=torch.zeros(24, dtype=torch.long)
    )
    none = EpisodeSampler(shapes, k=2, m=3, n_classes=3, episodes=5, seed=3)
    for i in range(5):
        assert torch.equal(one.episode(i).batch, none.episode(i).batch)
        assert torch.equal(one.episode(i).support, none.episode(i).support)


def test_episode_sampler_groups_errors():
    labels = torch.arange(4).repeat_interleave(6)
    with pytest.raises(ValueError, match="class 0 has items in groups"):
        EpisodeSampler(labels, k=2, m=3, n_classes=2, groups=torch.arange(24) % 2)
    groups = (labels >= 3).long()  # group 1 holds one class: fewer than n_classes
    with pytest.raises(ValueError, match="in group 1"):
        EpisodeSampler(labels, k=2, m=3, n_classes=2, groups=groups)
    with pytest.raises(ValueError, match="groups"):
        EpisodeSampler(labels, k=2, m=3, n_classes=2, groups=torch.zeros(5, dtype=torch.long))


# ----------------------------------------------------------------------------- evaluation setups
def _toy_base():
    g = torch.Generator().manual_seed(0)
    labels = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, -1, -1])
    images = torch.rand(11, 3, 8, 8, generator=g)
    emb = torch.nn.functional.normalize(torch.randn(11, 6, generator=g), dim=1)
    return images, labels, emb


def test_setup_c_equals_plain_all_vs_all_retrieval():
    from rank_lab.metrics import average_precision

    images, labels, emb = _toy_base()
    calls = []

    def describe(support):
        calls.append(support)
        return emb

    rep = evaluate_fewshot_retrieval(describe, images, labels, setup="C")
    assert len(calls) == 1 and calls[0] is None  # unadapted: the base is described once
    q = torch.nonzero(labels >= 0).flatten()
    s = emb[q] @ emb.T
    t = labels[q][:, None] == labels[None]
    keep = torch.ones_like(t)
    keep[torch.arange(len(q)), q] = False
    aps = torch.stack(
        [average_precision(s[i][keep[i]][None], t[i][keep[i]][None])[0] for i in range(len(q))]
    )
    assert abs(rep.summary["mAP"] - 100 * float(aps.mean())) < 1e-4


def test_setups_draw_the_right_supports():
    images, labels, _ = _toy_base()
    sup_b, idx_b = setup_supports("B", images, labels, k=2, seed=3)
    assert set(sup_b) == {0, 1, 2} and all(v.shape == (2, 3, 8, 8) for v in sup_b.values())
    for c, idx in idx_b.items():
        assert bool((labels[idx] == c).all())
        torch.testing.assert_close(sup_b[c], images[idx])
    sup_d, idx_d = setup_supports("D", images, labels, seed=1)
    assert idx_d == {} and all(v.shape == (1, 3, 8, 8) for v in sup_d.values())
    sup_r, _ = setup_supports("R", images, labels, k=2, seed=0)
    for c, v in sup_r.items():  # random-support control: images of *other* classes
        rows = [int(torch.nonzero((images == im).all(dim=(1, 2, 3))).flatten()[0]) for im in v]
        assert all(int(labels[r]) not in (c, -1) for r in rows)
    assert setup_supports("A", images, labels)[0][0].shape[0] == 1
    with pytest.raises(ValueError, match="setup"):
        setup_supports("E", images, labels)
    assert all(v.numel() == 3 for v in sample_supports(labels, 3).values())


def test_adapted_rankings_use_each_class_support_and_exclusion():
    images, labels, emb = _toy_base()
    seen = []

    def describe(support):
        seen.append(support.shape[0])
        # a "perfect" adaptation: items of the support's class move to a shared direction
        c = int(labels[int(torch.nonzero((images == support[0]).all(dim=(1, 2, 3))).flatten()[0])])
        out = emb.clone()
        out[labels == c] = torch.nn.functional.normalize(torch.ones(6), dim=0)
        return out

    scores, q = fewshot_retrieval_scores(
        describe, labels, setup_supports("B", images, labels, k=2)[0]
    )
    assert seen == [2, 2, 2] and scores.shape == (9, 11)
    rep = evaluate_fewshot_retrieval(describe, images, labels, setup="B", k=2)
    assert rep.summary["mAP"] == pytest.approx(100.0)
    # supports leave the queries and the rankings: with k = 1, two queries per class remain
    rep_x = evaluate_fewshot_retrieval(
        describe, images, labels, setup="B", k=1, exclude_support=True
    )
    assert rep_x.summary["n_queries"] == 6 and rep_x.summary["mAP"] == pytest.approx(100.0)
    rep_2 = evaluate_fewshot_retrieval(
        describe, images, labels, setup="B", k=2, exclude_support=True
    )
    assert rep_2.summary["n_queries"] == 0  # the last query of each class has no positive left
    with pytest.raises(ValueError, match="domains"):
        evaluate_fewshot_retrieval(describe, images, labels, torch.zeros(3), setup="B")


# ----------------------------------------------------------------------------- training
def _episode_data():
    from rank_lab.data.procedural import make_multi_source_images

    data = make_multi_source_images(
        n_classes=8, per_source=4, sources=("colour", "greyscale"), image_size=16, seed=0
    )
    return data.images, data.labels


def test_short_episodic_training_lowers_the_loss():
    images, labels = _episode_data()
    torch.manual_seed(0)
    model = build_rcnaps(
        "tiny", widths=(8, 16), encoder_width=16, encoder_depth=3, train_backbone=True
    )
    sampler = EpisodeSampler(labels, k=2, m=4, n_classes=4, episodes=8, seed=123)

    def held_out_loss() -> float:
        model.eval()
        with torch.no_grad():
            vals = [
                class_specific_smooth_ap(
                    model(images[e.batch], images[e.support]), e.batch_labels, e.target
                )
                for e in sampler
            ]
        return float(torch.stack(vals).mean())

    before = held_out_loss()
    losses = fit_rcnaps(model, images, labels, episodes=80, k=2, m=4, n_classes=4, lr=3e-3, seed=0)
    after = held_out_loss()
    assert len(losses) == 80 and all(np.isfinite(losses))
    assert after < before - 0.08, (before, after)  # about 0.72 -> 0.55


def test_training_resumes_exactly_from_a_checkpoint(tmp_path):
    images, labels = _episode_data()
    kw = dict(episodes=4, k=2, m=3, n_classes=3, lr=1e-3, seed=1)

    def fresh():
        torch.manual_seed(0)
        return build_rcnaps("tiny", widths=(8,), encoder_width=8, encoder_depth=2)

    full = fit_rcnaps(fresh(), images, labels, **kw)
    ckpt = tmp_path / "run.pt"
    model = fresh()
    fit_rcnaps(
        model,
        images,
        labels,
        engine=EngineConfig(checkpoint=ckpt, checkpoint_every=2),
        **{**kw, "episodes": 2},
    )
    resumed = fit_rcnaps(fresh(), images, labels, engine=EngineConfig(checkpoint=ckpt), **kw)
    np.testing.assert_allclose(resumed, full, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        fit_rcnaps(model, images, labels, mode="meta", **kw)


def test_fit_rcnaps_with_groups_trains_on_one_task_per_episode(tmp_path):
    images, labels = _episode_data()
    n = labels.shape[0]
    # two tasks over the same images: a second copy labelled by other (disjoint) classes
    two = torch.cat([images, images])
    both = torch.cat([labels, labels.flip(0) + int(labels.max()) + 1])
    groups = torch.arange(2).repeat_interleave(n)
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8,), encoder_width=8, encoder_depth=2)
    losses = fit_rcnaps(
        model,
        two,
        both,
        groups=groups,
        episodes=3,
        k=2,
        m=3,
        n_classes=3,
        lr=1e-3,
        seed=2,
        engine=EngineConfig(checkpoint=tmp_path / "g.pt"),
    )
    assert len(losses) == 3 and all(np.isfinite(losses))
    # the checkpoint knows it was grouped: resuming without groups refuses to mix the runs
    with pytest.raises(ValueError, match=r"different config \(groups: 2 -> None\)"):
        fit_rcnaps(
            model,
            two,
            both,
            episodes=4,
            k=2,
            m=3,
            n_classes=3,
            lr=1e-3,
            seed=2,
            engine=EngineConfig(checkpoint=tmp_path / "g.pt"),
        )
    with pytest.raises(ValueError, match="groups"):
        fit_rcnaps(model, two, both, groups=groups[:5], episodes=1, k=2, m=3, n_classes=3)


def test_plain_mode_trains_the_backbone_and_restores_the_freeze():
    images, labels = _episode_data()
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8,), encoder_width=8, encoder_depth=2)
    w0 = model.extractor.body.conv1.weight.detach().clone()
    a0 = [p.detach().clone() for p in model.adaptation.parameters()]
    fit_rcnaps(model, images, labels, episodes=2, k=2, m=3, n_classes=3, mode="plain", lr=1e-2)
    assert not torch.equal(model.extractor.body.conv1.weight, w0)
    assert all(torch.equal(a, b) for a, b in zip(a0, model.adaptation.parameters(), strict=True))
    assert not model.train_backbone


def test_rcnaps_describe_matches_direct_calls():
    images, labels = _episode_data()
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8, 16), encoder_width=16, encoder_depth=3).eval()
    describe = rcnaps_describe(model, images, batch_size=7)
    s = images[:3]
    with torch.no_grad():
        torch.testing.assert_close(describe(s), model(images, s), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(describe(None), model(images), rtol=1e-5, atol=1e-6)


def test_describing_several_tasks_in_one_pass_equals_one_pass_per_task():
    images, _ = _episode_data()
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8, 16), encoder_width=16, encoder_depth=3).eval()
    sup = torch.stack([images[:2], images[10:12], images[30:32]])
    many = rcnaps_describe_tasks(model, images[:20], sup, batch_size=7)
    assert many.shape == (3, 20, 16)
    with torch.no_grad():
        for t in range(3):
            torch.testing.assert_close(many[t], model(images[:20], sup[t]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="supports"):
        rcnaps_describe_tasks(model, images, images[:2])


def test_tiny_extractor_shapes():
    ext = film_tiny_resnet(1, widths=(4, 8, 16), blocks=(1, 2, 1))
    assert ext.blocks == [1, 2, 1] and ext.channels == [4, 8, 16]
    assert ext(torch.rand(2, 1, 8, 8)).shape == (2, 16, 2, 2)
    with pytest.raises(ValueError, match="params"):
        ext(torch.rand(2, 1, 8, 8), identity_film_params([4], [1]))
    with pytest.raises(ValueError, match="widths"):
        film_tiny_resnet(3, widths=(), blocks=1)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_rcnaps_on_cuda_matches_cpu():
    torch.manual_seed(0)
    model = build_rcnaps("tiny", widths=(8, 16), encoder_width=16, encoder_depth=3).eval()
    x, s = torch.rand(4, 3, 16, 16), torch.rand(2, 3, 16, 16)
    with torch.no_grad():
        cpu = model(x, s)
        gpu = model.cuda()(x.cuda(), s.cuda()).cpu()
    torch.testing.assert_close(gpu, cpu, rtol=1e-4, atol=1e-4)
