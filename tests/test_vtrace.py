"""V-trace (alf.utils.value_ops.vtrace) against a direct numpy implementation of the
recursion, and against GAE when the behaviour and target policies agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alf.data_structures import StepType
from alf.utils.value_ops import generalized_advantage_estimation, vtrace


def _random_trajectory(seed: int, length: int = 12, batch: int = 5) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    step_types = np.full((length + 1, batch), StepType.MID)
    discounts = np.ones((length + 1, batch), dtype=np.float32)
    for b in range(batch):
        t = 0
        while t < length + 1:
            step_types[t, b] = StepType.FIRST
            end = t + int(rng.integers(2, 6))
            if end <= length:
                step_types[end, b] = StepType.LAST
                discounts[end, b] = float(rng.integers(0, 2))  # terminated or truncated
            t = end + 1
    return {
        "rewards": torch.tensor(rng.normal(size=(length + 1, batch)), dtype=torch.float32),
        "values": torch.tensor(rng.normal(size=(length + 1, batch)), dtype=torch.float32),
        "step_types": torch.tensor(step_types, dtype=torch.int32),
        "discounts": torch.tensor(discounts),
        "log_rhos": torch.tensor(rng.normal(scale=0.7, size=(length, batch)), dtype=torch.float32),
    }


def _reference(data, gamma, lam, clip_rho, clip_c, clip_pg):
    """One environment and one step at a time, straight from the definition."""
    r, v = data["rewards"].double().numpy(), data["values"].double().numpy()
    st, d = data["step_types"].numpy(), data["discounts"].double().numpy()
    ratio = np.exp(data["log_rhos"].double().numpy())
    length, batch = ratio.shape
    vs = np.zeros((length, batch))
    adv = np.zeros((length, batch))
    for b in range(batch):
        next_correction = 0.0  # v_{t+1} - V_{t+1}
        for t in range(length - 1, -1, -1):
            if st[t, b] == StepType.LAST:
                vs[t, b], next_correction = v[t, b], 0.0
                continue
            rho, c = min(clip_rho, ratio[t, b]), lam * min(clip_c, ratio[t, b])
            delta = rho * (r[t + 1, b] + gamma * d[t + 1, b] * v[t + 1, b] - v[t, b])
            correction = delta + gamma * d[t + 1, b] * c * next_correction
            vs[t, b] = v[t, b] + correction
            next_v = vs[t + 1, b] if t + 1 < length else v[length, b]
            target = r[t + 1, b] + gamma * d[t + 1, b] * next_v
            adv[t, b] = min(clip_pg, ratio[t, b]) * (target - v[t, b])
            next_correction = correction
    return vs, adv


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(
    "gamma, lam, clip_rho, clip_c, clip_pg",
    [(0.99, 1.0, 1.0, 1.0, 1.0), (0.9, 0.95, 2.0, 1.0, 1.5), (0.97, 0.8, 0.5, 0.7, 0.9)],
)
def test_vtrace_matches_the_direct_recursion(seed, gamma, lam, clip_rho, clip_c, clip_pg):
    data = _random_trajectory(seed)
    vs, adv = vtrace(
        **data, gamma=gamma, td_lambda=lam, clip_rho=clip_rho, clip_c=clip_c, clip_pg_rho=clip_pg
    )
    ref_vs, ref_adv = _reference(data, gamma, lam, clip_rho, clip_c, clip_pg)
    np.testing.assert_allclose(vs.numpy(), ref_vs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-5, atol=1e-5)


def test_on_policy_vtrace_equals_gae_lambda_returns():
    """With every ratio 1, v_s are GAE's lambda-returns (on valid rows)."""
    data = _random_trajectory(7)
    data["log_rhos"] = torch.zeros_like(data["log_rhos"])
    vs, _ = vtrace(**data, gamma=0.95, td_lambda=0.9)
    advantages, returns = generalized_advantage_estimation(
        rewards=data["rewards"],
        values=data["values"],
        step_types=data["step_types"],
        discounts=data["discounts"],
        gamma=0.95,
        td_lambda=0.9,
    )
    valid = data["step_types"][:-1] != StepType.LAST
    torch.testing.assert_close(vs[valid], returns[valid])


def test_log_rhos_may_have_a_bootstrap_row():
    data = _random_trajectory(3)
    short = vtrace(**data, gamma=0.9)
    data["log_rhos"] = torch.cat([data["log_rhos"], torch.full_like(data["log_rhos"][:1], 9.0)])
    long = vtrace(**data, gamma=0.9)
    for a, b in zip(short, long, strict=True):
        torch.testing.assert_close(a, b)
