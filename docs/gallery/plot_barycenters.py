"""
Barycenters
===========

Left: the sliced (SW_2) free-support barycenter of four point clouds, a ring, a square,
a triangle and a cross, with :func:`tsw.free_support_barycenter`. The other panels: two
of 40 images of a randomly placed ring on a 16 x 16 grid, and (right) their fixed-support
barycenters with :func:`tsw.tree_barycenter`, on one quadtree of the pixel positions (the
barycenter for that tree's path metric) and on ten (the tree-sliced barycenter, closer to
the Euclidean one). Each is a linear program solved to a certified gap: ``log=True``
returns the objective and a lower bound on its minimum.
"""

import math

import matplotlib.pyplot as plt
import torch

import tsw

torch.set_num_threads(1)
g = torch.Generator().manual_seed(0)
n = 200
t = torch.rand(n, generator=g, dtype=torch.float64)
ring = torch.stack([torch.cos(2 * math.pi * t), torch.sin(2 * math.pi * t)], 1)


def polygon(corners):
    s = torch.rand(n, generator=g, dtype=torch.float64) * len(corners)
    i = s.floor().long()
    f = (s - i)[:, None]
    return corners[i] * (1 - f) + corners[(i + 1) % len(corners)] * f


square = polygon(torch.tensor([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=torch.float64))
triangle = polygon(torch.tensor([[-1, -0.6], [1, -0.6], [0, 1.1]], dtype=torch.float64))
u = 2 * torch.rand(n, generator=g, dtype=torch.float64) - 1
horizontal = torch.rand(n, generator=g) < 0.5
cross = torch.where(horizontal[:, None], torch.stack([u, 0 * u], 1), torch.stack([0 * u, u], 1))
clouds = [ring, square, triangle, cross]
X = tsw.free_support_barycenter(clouds, numItermax=60, seed=0)

# images: a ring of radius 4 around a random centre, blurred, on a 16 x 16 grid
side = 16
axis = torch.arange(side, dtype=torch.float64)
grid = torch.stack(torch.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
centres = 5.5 + 4 * torch.rand(40, 2, generator=g, dtype=torch.float64)
radius = (grid[None] - centres[:, None]).norm(dim=-1)
images = torch.exp(-((radius - 4) ** 2) / 0.8)
images = images / images.sum(1, keepdim=True)
bars = {}
for T in (1, 10):
    trees = tsw.sample_quadtrees(grid, n_trees=T, seed=0)
    bars[T], log = tsw.tree_barycenter(images, trees, log=True)
    print(
        f"{T} quadtree(s): objective {float(log['value']):.4f}, at most "
        f"{100 * float(log['gap']):.2f}% above its minimum, {log['n_iter']} iterations"
    )
print("free support: mean of the support", X.mean(0).tolist())

fig, axes = plt.subplots(1, 5, figsize=(13.5, 3))
for c in clouds:
    axes[0].scatter(*c.T, s=2, alpha=0.3)
axes[0].scatter(*X.T, s=4, c="k")
axes[0].set_title("four shapes and their SW_2 barycenter", fontsize=8)
axes[0].set_aspect("equal")
for k, ax in enumerate(axes[1:3]):
    ax.imshow(images[k].reshape(side, side), cmap="gray_r")
    ax.set_title(f"image {k + 1} of 40", fontsize=8)
for ax, T in zip(axes[3:], (1, 10), strict=True):
    ax.imshow(bars[T].reshape(side, side), cmap="gray_r")
    ax.set_title(f"tree barycenter ({T} quadtree{'s' if T > 1 else ''})", fontsize=8)
for ax in axes[1:]:
    ax.set_axis_off()
plt.show()
