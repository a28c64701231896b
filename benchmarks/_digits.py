"""scikit-learn's 8x8 digits with a fixed train/test split, shared by the training benchmarks.

The data ship inside scikit-learn (1,797 images, 10 classes, pixel values 0..16), so
nothing is downloaded at run time. Images are scaled to ``[0, 1]`` and flattened to 64
features. The split is stratified by class and fixed by ``split_seed`` (default 0):
1,437 training and 360 test images.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

N_CLASSES = 10
SIDE = 8


class Digits(NamedTuple):
    """Train and test images, shape (n, 64) in ``[0, 1]``, and their labels (n,)."""

    X_train: Tensor
    y_train: Tensor
    X_test: Tensor
    y_test: Tensor


def load_digits_split(
    test_fraction: float = 0.2, split_seed: int = 0, dtype: torch.dtype = torch.float32
) -> Digits:
    """The fixed, class-stratified split of scikit-learn's digits (no download)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    X = data.data.astype(np.float64) / 16.0
    y = data.target.astype(np.int64)
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=test_fraction, random_state=split_seed, stratify=y
    )
    as_x = lambda a: torch.as_tensor(a, dtype=dtype)  # noqa: E731
    as_y = lambda a: torch.as_tensor(a, dtype=torch.long)  # noqa: E731
    return Digits(as_x(X_tr), as_y(y_tr), as_x(X_te), as_y(y_te))
