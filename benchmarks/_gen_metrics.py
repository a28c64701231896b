"""Metrics of the generative benchmarks on the 8x8 digits: a feature classifier and its scores.

* :class:`DigitsClassifier`: a small convolutional classifier of the 8x8 digits, trained
  on the fixed training split of :func:`benchmarks._digits.load_digits_split` in a few
  seconds on one CPU thread; its 64-d penultimate layer is the feature space of the
  Fréchet distance. :func:`load_classifier` caches the weights (``digits_classifier.pt``)
  and retrains when the file is missing or stale; its held-out accuracy must be >= 97 %.
* :func:`frechet_distance`: the Fréchet distance between the Gaussians fitted to two
  feature sets (the FID formula, here in the classifier's feature space, not Inception's).
* :func:`exact_w2`: the exact Wasserstein-2 distance between two uniform point clouds
  (``ot.emd2``, squared Euclidean cost, float64), returned as the root.
* :func:`coverage`: the entropy of the predicted classes and the number of classes that
  receive at least 5 % of the samples.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks._digits import N_CLASSES, SIDE, load_digits_split
from tsw import metrics

MIN_ACCURACY = 0.97
CLASSIFIER_VERSION = 1  # bump when the architecture or the training recipe changes


class DigitsClassifier(nn.Module):
    """Two 3x3 conv layers, a 2x2 max-pool, a 64-d feature layer and a linear head."""

    def __init__(self, feature_dim: int = 64):
        super().__init__()
        self.body = nn.Sequential(
            nn.Unflatten(1, (1, SIDE, SIDE)),
            nn.Conv2d(1, 32, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Dropout(0.3),
            nn.Linear(64 * (SIDE // 2) ** 2, feature_dim),
            nn.ReLU(),
        )
        self.head = nn.Linear(feature_dim, N_CLASSES)

    def features(self, X: Tensor) -> Tensor:
        """Penultimate features (n, feature_dim) of images (n, 64) in [0, 1]."""
        return self.body(X)

    def forward(self, X: Tensor) -> Tensor:
        return self.head(self.body(X))


def _shift_augment(X: Tensor, g: torch.Generator) -> Tensor:
    """Random translations by at most one pixel (zero padding), a light augmentation."""
    n = len(X)
    imgs = X.view(n, 1, SIDE, SIDE)
    padded = nn.functional.pad(imgs, (1, 1, 1, 1))
    dx = torch.randint(0, 3, (n,), generator=g)
    dy = torch.randint(0, 3, (n,), generator=g)
    rows = (torch.arange(SIDE)[None, :] + dy[:, None])[:, :, None].expand(n, SIDE, SIDE)
    cols = (torch.arange(SIDE)[None, :] + dx[:, None])[:, None, :].expand(n, SIDE, SIDE)
    idx = rows * (SIDE + 2) + cols
    out = padded.view(n, -1).gather(1, idx.reshape(n, -1))
    return out.view(n, SIDE * SIDE)


def train_classifier(epochs: int = 40, seed: int = 0, batch: int = 64) -> tuple[nn.Module, float]:
    """Train :class:`DigitsClassifier` on the training split; return it and test accuracy."""
    data = load_digits_split()
    torch.manual_seed(seed)
    model = DigitsClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs)
    g = torch.Generator().manual_seed(seed)
    n = len(data.X_train)
    for _ in range(epochs):
        model.train()
        perm = torch.randperm(n, generator=g)
        for i in range(0, n, batch):
            idx = perm[i : i + batch]
            x = _shift_augment(data.X_train[idx], g)
            loss = nn.functional.cross_entropy(model(x), data.y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        sched.step()
    model.eval()
    return model, accuracy(model, data.X_test, data.y_test)


@torch.no_grad()
def accuracy(model: nn.Module, X: Tensor, y: Tensor) -> float:
    """Share of correct predictions."""
    model.eval()
    return float((model(X.float()).argmax(-1) == y).double().mean())


def load_classifier(path: str | Path = "benchmarks/out/digits_classifier.pt", verbose=True):
    """The cached classifier (retrained and saved when missing or stale) and its accuracy.

    Raises ``AssertionError`` when the held-out accuracy is below :data:`MIN_ACCURACY`.
    """
    path = Path(path)
    data = load_digits_split()
    model = DigitsClassifier()
    if path.exists():
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state.get("version") == CLASSIFIER_VERSION:
            model.load_state_dict(state["weights"])
            acc = accuracy(model, data.X_test, data.y_test)
            if acc >= MIN_ACCURACY:
                return model.eval(), acc
    t0 = time.perf_counter()
    model, acc = train_classifier()
    if verbose:
        print(f"trained the digits classifier in {time.perf_counter() - t0:.1f} s: accuracy {acc}")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"version": CLASSIFIER_VERSION, "weights": model.state_dict()}, path)
    assert acc >= MIN_ACCURACY, f"classifier test accuracy {acc:.4f} < {MIN_ACCURACY}"
    return model.eval(), acc


def _sqrtm_psd(S: np.ndarray) -> np.ndarray:
    """Square root of a symmetric positive semi-definite matrix (eigenvalues clipped at 0)."""
    w, V = np.linalg.eigh((S + S.T) / 2)
    return (V * np.sqrt(np.clip(w, 0, None))) @ V.T


def frechet_distance(mu1, S1, mu2, S2) -> float:
    """Squared Fréchet (W2) distance between N(mu1, S1) and N(mu2, S2), float64.

    ``|mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1^1/2 S2 S1^1/2)^1/2)``, with symmetric square
    roots (eigendecompositions), which avoids the complex round-off of a general
    ``sqrtm(S1 @ S2)``; the value is the same.
    """
    mu1, mu2 = np.asarray(mu1, np.float64), np.asarray(mu2, np.float64)
    S1, S2 = np.asarray(S1, np.float64), np.asarray(S2, np.float64)
    r1 = _sqrtm_psd(S1)
    cross = _sqrtm_psd(r1 @ S2 @ r1)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(S1) + np.trace(S2) - 2 * np.trace(cross))


def gaussian_stats(F: Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and (unbiased) covariance of the rows of ``F``, float64."""
    F = np.asarray(F.detach().cpu() if isinstance(F, Tensor) else F, np.float64)
    return F.mean(0), np.cov(F, rowvar=False)


@torch.no_grad()
def fid(model: DigitsClassifier, X: Tensor, Y: Tensor) -> float:
    """Fréchet distance between the classifier features of image sets ``X`` and ``Y``."""
    fx = model.features(X.detach().float().cpu())
    fy = model.features(Y.detach().float().cpu())
    return frechet_distance(*gaussian_stats(fx), *gaussian_stats(fy))


def exact_w2(X: Tensor, Y: Tensor) -> float:
    """Exact W2 (the root) between uniform clouds: :func:`tsw.metrics.wasserstein`."""
    return metrics.wasserstein(X, Y)


def coverage(labels: Tensor | np.ndarray, n_classes: int = N_CLASSES, threshold: float = 0.05):
    """Entropy (nats) of the label histogram and the number of classes with >= threshold."""
    labels = np.asarray(labels.cpu() if isinstance(labels, Tensor) else labels, np.int64)
    share = np.bincount(labels, minlength=n_classes)[:n_classes] / max(len(labels), 1)
    nz = share[share > 0]
    return float(max(-(nz * np.log(nz)).sum(), 0.0)), int((share >= threshold).sum())


@torch.no_grad()
def predict(model: DigitsClassifier, X: Tensor) -> Tensor:
    """Predicted classes of images (n, 64)."""
    return model(X.detach().float().cpu()).argmax(-1)
