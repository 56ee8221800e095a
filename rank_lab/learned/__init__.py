"""Learned surrogates of non-differentiable metrics (Patel thesis, Ch. 3 and 4).

* :mod:`rank_lab.learned.surrogate_model` -- the LS framework: ``e_hat = ||h(z) - h(y)||``
  (eq. 3.3), its training loss with gradient penalty (eq. 3.6 / 4.5), the task interface and the
  configuration; :mod:`rank_lab.learned.embeddings` -- the Char-CNN and box-MLP embeddings;
* :mod:`rank_lab.learned.surrogate_trainer` -- the alternating training of surrogate and model
  (Algorithm 1, :class:`SurrogateTrainer`);
* :mod:`rank_lab.learned.proxy_training` -- the proxy pre-training loop of the task models;
* :mod:`rank_lab.learned.feds` -- FEDS: the filtered model loss (eq. 4.7, two readings) and
  Algorithm 2 (:class:`FEDSTrainer`);
* :mod:`rank_lab.learned.recognizer` -- a CNN + BiLSTM + CTC recogniser, greedy decoding, CTC
  forced alignment;
* :mod:`rank_lab.learned.render` -- procedural word images (matplotlib's fonts);
* :mod:`rank_lab.learned.edit_task` -- the LS-ED / FEDS task and its random word-pair generator;
* :mod:`rank_lab.learned.boxes` -- the LS-IoU task: a box regressor, the stored perturbed-pair
  generator, the task adapter;
* :mod:`rank_lab.learned.box_images` -- the LS-IoU task's procedural rotated-box images.
"""

from rank_lab.learned.box_images import make_box_dataset
from rank_lab.learned.boxes import BoxIoUTask, BoxRegressor, RotatedBoxPairBank
from rank_lab.learned.edit_task import CTCEditPairGenerator, EditDistanceTask
from rank_lab.learned.embeddings import BoxMLP, CharCNN
from rank_lab.learned.feds import FEDSConfig, FEDSTrainer, feds_filter, feds_loss
from rank_lab.learned.recognizer import CRNN, Alphabet, ctc_best_path, fit_ctc, greedy_decode
from rank_lab.learned.render import WordRenderer, make_word_dataset
from rank_lab.learned.surrogate_model import EmbeddingSurrogate, LSConfig, surrogate_loss
from rank_lab.learned.surrogate_trainer import SurrogateTrainer, evaluate_surrogate

__all__ = [
    "EmbeddingSurrogate",
    "CharCNN",
    "BoxMLP",
    "surrogate_loss",
    "LSConfig",
    "SurrogateTrainer",
    "evaluate_surrogate",
    "FEDSConfig",
    "FEDSTrainer",
    "feds_filter",
    "feds_loss",
    "CRNN",
    "Alphabet",
    "ctc_best_path",
    "fit_ctc",
    "greedy_decode",
    "WordRenderer",
    "make_word_dataset",
    "CTCEditPairGenerator",
    "EditDistanceTask",
    "BoxIoUTask",
    "BoxRegressor",
    "RotatedBoxPairBank",
    "make_box_dataset",
]
