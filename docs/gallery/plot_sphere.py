"""
Distances on the sphere
=======================

Spherical tree-sliced Wasserstein (STSW) between a von Mises-Fisher cloud and the
12-component mixture of the STSW paper, both from :mod:`tsw.datasets`, beside the
sliced baselines and the exact geodesic :math:`W_2` of :mod:`tsw.metrics`.
"""

import matplotlib.pyplot as plt
import torch

import tsw

torch.set_num_threads(1)
north = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
X = tsw.datasets.sample_vmf(north, 10.0, 240, seed=1)
Y = tsw.datasets.make_vmf_mixture(20, 50.0, seed=0)
print("STSW (200x5)       ", float(tsw.stsw(X, Y, n_trees=200, n_lines=5, seed=0)))
print("SSW_2 (20 circles) ", float(tsw.ssw(X, Y, n_projections=20, seed=0)))
print("S3W_2 (500 lines)  ", float(tsw.s3w(X, Y, n_projections=500, seed=0)))
print("exact geodesic W_2 ", tsw.metrics.geodesic_wasserstein(X, Y))
nll = tsw.metrics.vmf_mixture_nll(X, tsw.datasets.icosahedron(), 50.0)
print("NLL of X under the mixture", nll)

fig = plt.figure(figsize=(4.5, 4.5))
ax = fig.add_subplot(projection="3d")
ax.scatter(*Y.T, s=4, label="12 vMF (kappa = 50)")
ax.scatter(*X.T, s=4, label="vMF at the north pole (kappa = 10)")
ax.scatter(*tsw.datasets.icosahedron().T, s=40, c="k", marker="*")
ax.set_box_aspect((1, 1, 1))
ax.set_axis_off()
ax.legend(fontsize=7, loc="lower center")
plt.show()
