"""
A gradient flow onto 25 Gaussians
=================================

A cloud follows Adam on a tree-sliced loss towards the 25-Gaussians target of
:mod:`tsw.datasets`; the exact squared :math:`W_2` of :mod:`tsw.metrics` measures the
progress. A small run (100 points, 150 steps).
"""

import matplotlib.pyplot as plt
import torch

import tsw

torch.set_num_threads(1)
Y = tsw.datasets.make_25gaussians(100, seed=0, dtype=torch.float32)
losses = {
    "SW_2 (L=100)": tsw.nn.SWLoss(n_projections=100, seed=0),
    "Db-TSW (25x4)": tsw.nn.DbTSWLoss(n_trees=25, n_lines=4, delta=1.0, seed=0),
}
fig, axes = plt.subplots(1, 3, figsize=(12, 3.6))
for ax, (name, loss_fn) in zip(axes, losses.items(), strict=False):
    X = torch.randn(100, 2, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
    opt = torch.optim.Adam([X], lr=2e-2)
    curve = []
    for step in range(150):
        opt.zero_grad()
        loss_fn(X, Y).backward()
        opt.step()
        if step % 10 == 9:
            curve.append((step + 1, tsw.metrics.wasserstein(X, Y, power=True)))
    axes[2].semilogy(*zip(*curve, strict=True), "o-", ms=3, label=name)
    ax.scatter(*Y.T, s=8, label="target")
    ax.scatter(*X.detach().T, s=8, marker="x", label="after 150 steps")
    ax.set(title=name, aspect="equal", xticks=[], yticks=[])
axes[0].legend(fontsize=7, loc="lower left")
axes[2].set(xlabel="step", ylabel="exact $W_2^2$")
axes[2].legend(fontsize=7)
fig.tight_layout()
plt.show()
