"""Procedural word images: random words rendered with the fonts that ship with matplotlib/Pillow.

The thesis trains its recognisers on MJSynth + SynthText (14.4M synthetic crops, Sec. 3.3.2);
this module is a miniature, offline stand-in in the same spirit as MJSynth: a random word is drawn
in a random font and grey levels, then warped by a random perspective, blurred and noised. It uses
the DejaVu / STIX TrueType fonts of matplotlib's ``mpl-data`` (always present when matplotlib is
installed) and falls back to Pillow's built-in font. Everything is deterministic given ``seed``.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from rank_lab._validation import check_float, check_positive_int

__all__ = ["DEFAULT_FONTS", "font_paths", "random_words", "WordRenderer", "make_word_dataset"]

#: matplotlib fonts used by default (regular, bold, oblique, serif and monospace faces).
DEFAULT_FONTS = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
)


def font_paths(names: Sequence[str] = DEFAULT_FONTS) -> list[Path]:
    """Paths of the TrueType fonts ``names`` found in matplotlib's ``mpl-data/fonts/ttf``.

    Returns an empty list when matplotlib is missing (the renderer then uses Pillow's default).
    Names that are not found are skipped.

    Raises:
        TypeError: ``names`` is a single string or holds a non-string.
    """
    if isinstance(names, (str, bytes)) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be a sequence of font file names (str), got {names!r}")
    try:
        # optional dependency (extra "plots"), imported where it is used
        import matplotlib
    except ImportError:  # pragma: no cover - matplotlib is a book dependency
        return []
    root = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    return [root / n for n in names if (root / n).is_file()]


@lru_cache(maxsize=256)
def _font(path: str, size: int):  # noqa: ANN202 - PIL font object

    if path == "":
        try:
            return ImageFont.load_default(size=size)
        except TypeError:  # pragma: no cover - Pillow < 10.1
            return ImageFont.load_default()
    return ImageFont.truetype(path, size=size)


def random_words(
    n: int,
    alphabet: str = string.ascii_lowercase,
    min_len: int = 3,
    max_len: int = 8,
    seed: int | np.random.Generator = 0,
) -> list[str]:
    """``n`` random strings with lengths uniform in ``[min_len, max_len]`` over ``alphabet``.

    Args:
        n: number of words.
        alphabet: the characters (a non-empty string).
        min_len, max_len: word lengths, ``1 <= min_len <= max_len``.
        seed: an int seed or a NumPy generator.
    """
    n = check_positive_int(n, "n")
    if not isinstance(alphabet, str) or not alphabet:
        raise ValueError(f"alphabet must be a non-empty str, got {alphabet!r}")
    min_len, max_len = (
        check_positive_int(min_len, "min_len"),
        check_positive_int(max_len, "max_len"),
    )
    if not min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    chars = np.array(list(alphabet))
    lens = rng.integers(min_len, max_len + 1, size=n)
    return ["".join(rng.choice(chars, size=k)) for k in lens]


def _perspective_coeffs(dst: np.ndarray, src: np.ndarray) -> list[float]:
    """PIL PERSPECTIVE coefficients mapping output points ``dst`` (4, 2) to input points ``src``."""
    a = []
    for (x, y), (u, v) in zip(dst, src, strict=True):
        a.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        a.append([0, 0, 0, x, y, 1, -v * x, -v * y])
    return np.linalg.solve(np.asarray(a, float), src.reshape(8)).tolist()


class WordRenderer:
    """Render a word into a ``(height, width)`` grey image in ``[0, 1]``.

    Args:
        height: output height in pixels (the thesis' recognisers take 32).
        width: output width in pixels (100 in the thesis).
        fonts: TrueType font paths; default :func:`font_paths` (Pillow's font if none found).
        noise: maximum standard deviation of the additive Gaussian noise (drawn per image).
        blur: maximum Gaussian-blur radius in output pixels (drawn per image).
        perspective: maximum corner displacement of the random perspective warp, as a fraction
            of the image size (0 disables it).
        min_contrast: minimum grey-level difference between text and background.
        supersample: the word is drawn at this multiple of the output size, then downsampled.
    """

    def __init__(
        self,
        height: int = 32,
        width: int = 100,
        fonts: Sequence[str | Path] | None = None,
        noise: float = 0.06,
        blur: float = 0.8,
        perspective: float = 0.08,
        min_contrast: float = 0.35,
        supersample: int = 2,
    ) -> None:
        self.height = check_positive_int(height, "height")
        self.width = check_positive_int(width, "width")
        self.supersample = check_positive_int(supersample, "supersample")
        noise, blur = check_float(noise, "noise", low=0), check_float(blur, "blur", low=0)
        perspective = check_float(perspective, "perspective", low=0)
        min_contrast = check_float(min_contrast, "min_contrast", low=0, high=1, low_open=True)
        self.fonts = [str(p) for p in (font_paths() if fonts is None else fonts)] or [""]
        self.noise, self.blur, self.perspective, self.min_contrast = (
            noise,
            blur,
            perspective,
            min_contrast,
        )

    def render(self, word: str, rng: np.random.Generator) -> np.ndarray:
        """Render ``word`` with random style drawn from ``rng``; returns ``(H, W)`` float32."""
        s = self.supersample
        big_w, big_h = self.width * s, self.height * s
        font = _font(self.fonts[int(rng.integers(len(self.fonts)))], int(big_h * 0.75))
        bg = float(rng.uniform(0, 1))
        fg = float(rng.uniform(0, 1))
        if abs(fg - bg) < self.min_contrast:
            fg = bg + self.min_contrast if bg < 1 - self.min_contrast else bg - self.min_contrast
        # Draw the text tightly, then scale it into the canvas (random size and position).
        left, top, right, bottom = font.getbbox(word or " ")
        tw, th = max(right - left, 1), max(bottom - top, 1)
        txt = Image.new("L", (tw + 4, th + 4), 0)
        ImageDraw.Draw(txt).text((2 - left, 2 - top), word, fill=255, font=font)
        scale = min(
            big_w * rng.uniform(0.7, 0.95) / txt.width, big_h * rng.uniform(0.6, 0.9) / txt.height
        )
        txt = txt.resize(
            (max(1, int(txt.width * scale)), max(1, int(txt.height * scale))), Image.BILINEAR
        )
        mask = Image.new("L", (big_w, big_h), 0)
        ox = int(rng.integers(0, max(1, big_w - txt.width + 1)))
        oy = int(rng.integers(0, max(1, big_h - txt.height + 1)))
        mask.paste(txt, (ox, oy))
        if self.perspective > 0:
            dst = np.array([[0, 0], [big_w, 0], [big_w, big_h], [0, big_h]], float)
            jitter = rng.uniform(-1, 1, size=(4, 2)) * self.perspective * np.array([big_w, big_h])
            mask = mask.transform(
                (big_w, big_h),
                Image.PERSPECTIVE,
                _perspective_coeffs(dst, dst + jitter),
                Image.BILINEAR,
            )
        mask = mask.resize((self.width, self.height), Image.BOX)
        if self.blur > 0:
            mask = mask.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0, self.blur))))
        alpha = np.asarray(mask, dtype=np.float32) / 255.0
        img = bg + (fg - bg) * alpha
        if self.noise > 0:
            img = img + rng.normal(0, rng.uniform(0, self.noise), size=img.shape)
        return np.clip(img, 0, 1).astype(np.float32)

    def render_batch(
        self, words: Sequence[str], seed: int | np.random.Generator = 0
    ) -> torch.Tensor:
        """Render ``words`` into a ``(N, 1, H, W)`` float tensor (deterministic given ``seed``)."""
        rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        return torch.from_numpy(np.stack([self.render(w, rng) for w in words]))[:, None]


def make_word_dataset(
    n: int,
    alphabet: str = string.ascii_lowercase,
    min_len: int = 3,
    max_len: int = 8,
    height: int = 32,
    width: int = 100,
    seed: int = 0,
    **render_kwargs: object,
) -> tuple[torch.Tensor, list[str]]:
    """A procedural scene-text set: ``n`` random words and their rendered images.

    Args:
        n: number of words.
        alphabet: characters of the words.
        min_len: shortest word.
        max_len: longest word.
        height: image height.
        width: image width.
        seed: seeds both the words and their rendering.
        **render_kwargs: forwarded to :class:`WordRenderer` (``noise``, ``blur``,
            ``perspective`` ...).

    Returns:
        ``images`` of shape ``(n, 1, height, width)`` in ``[0, 1]`` and the ``n`` words.
    """
    rng = np.random.default_rng(seed)
    words = random_words(n, alphabet, min_len, max_len, rng)
    renderer = WordRenderer(height=height, width=width, **render_kwargs)  # type: ignore[arg-type]
    return renderer.render_batch(words, rng), words
