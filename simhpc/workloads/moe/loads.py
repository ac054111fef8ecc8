"""Expert-load dynamics: per-layer routing shares that drift with temporal locality.

Each layer ``l`` has a logit vector ``x[l]`` over its experts; its routing shares are
``softmax(x[l])``. From one iteration to the next the logits follow a stationary AR(1)
(a discretised Ornstein-Uhlenbeck process):

    x[i+1] = rho * x[i] + skew * sqrt(1 - rho**2) * eps,   eps ~ N(0, I),   rho = 1 - dynamicity

* ``dynamicity = 0``: the shares never change (static);
* small ``dynamicity``: temporal locality, the load at ``i+1`` is close to the load at ``i``,
  and the correlation decays as ``rho**n`` over ``n`` iterations;
* ``dynamicity = 1``: independent draws each iteration.

The stationary law is ``N(0, skew**2)`` for every dynamicity, so the typical imbalance is the
same and only its speed of change differs. Layers draw independently: different layers have
different loads (layer-level dynamicity). The sequence depends on the seed alone, so every
policy sees the same loads; it is generated lazily and cached by iteration index, so an
iteration re-executed after a rollback sees the same loads again.
"""

from __future__ import annotations

import numpy as np


class ExpertLoads:
    """The routing shares of every layer at every iteration.

    Args:
        rng: the random stream (the workload passes ``sim.rng("moe.loads")``).
        layers: MoE layers.
        experts: experts per layer.
        dynamicity: 0..1, see the module docstring.
        skew: stationary standard deviation of the logits.
        start: ``"stationary"`` or ``"uniform"`` (x[0] = 0).
    """

    def __init__(
        self,
        rng: np.random.Generator,
        layers: int,
        experts: int,
        dynamicity: float,
        skew: float,
        start: str = "stationary",
    ) -> None:
        if not 0.0 <= dynamicity <= 1.0:
            raise ValueError(f"dynamicity must be in [0, 1], got {dynamicity}")
        self.rng = rng
        self.layers = layers
        self.experts = experts
        self.rho = 1.0 - dynamicity
        self.skew = skew
        # Draw the innovations even when dynamicity is 0 so that the stream's use does not
        # depend on the parameters (two scenarios differing in dynamicity share x[0]).
        first = rng.standard_normal((layers, experts))
        self._logits = [first * skew if start == "stationary" else np.zeros((layers, experts))]
        self._shares: list[np.ndarray] = []

    def logits(self, iteration: int) -> np.ndarray:
        """``(layers, experts)`` logits at ``iteration`` (>= 0)."""
        if iteration < 0:
            raise ValueError(f"iteration must be >= 0, got {iteration}")
        scale = self.skew * np.sqrt(max(0.0, 1.0 - self.rho**2))
        while len(self._logits) <= iteration:
            noise = self.rng.standard_normal((self.layers, self.experts))
            self._logits.append(self.rho * self._logits[-1] + scale * noise)
        return self._logits[iteration]

    def shares(self, iteration: int) -> np.ndarray:
        """``(layers, experts)`` routing shares (rows sum to 1) at ``iteration``."""
        while len(self._shares) <= iteration:
            x = self.logits(len(self._shares))
            z = np.exp(x - x.max(axis=1, keepdims=True))
            self._shares.append(z / z.sum(axis=1, keepdims=True))
        return self._shares[iteration]
