"""Value targets over time-major trajectories: GAE advantages, lambda-returns, n-step
returns and V-trace.

A trajectory of ``T + 1`` rows holds time steps ``0..T``: row ``t`` carries the reward
and discount of *arriving* at step ``t``, and the value of its observation. Targets are
produced for rows ``0..T-1``; row ``T`` only bootstraps. A row whose step is LAST starts
no transition (its action is ignored by the environment), so its target is 0 and it is
masked out of losses by :func:`valid_mask`.
"""

from __future__ import annotations

import torch

from alf.data_structures import StepType

__all__ = [
    "generalized_advantage_estimation",
    "n_step_return",
    "valid_mask",
    "vtrace",
]


def valid_mask(step_type: torch.Tensor) -> torch.Tensor:
    """``[T+1, B] -> [T, B]`` float mask of rows whose action starts a real transition."""
    return (step_type[:-1] != StepType.LAST).to(torch.float32)


def generalized_advantage_estimation(
    rewards: torch.Tensor,
    values: torch.Tensor,
    step_types: torch.Tensor,
    discounts: torch.Tensor,
    gamma: float,
    td_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(lambda) advantages and lambda-returns.

    Args:
        rewards: ``[T+1, B]`` time-major tensor.
        values: ``[T+1, B]`` time-major tensor.
        step_types: ``[T+1, B]`` time-major tensor.
        discounts: ``[T+1, B]`` time-major tensor.
        gamma: discount factor.
        td_lambda: GAE's lambda (1 gives Monte-Carlo advantages, 0 one-step TD).

    Returns:
        ``(advantages, returns)``, both ``[T, B]``; ``returns = advantages + values[:-1]``.
        Rows that are LAST get advantage 0.
    """
    valid = valid_mask(step_types)
    next_discount = gamma * discounts[1:]
    deltas = (rewards[1:] + next_discount * values[1:] - values[:-1]) * valid
    # An episode's chain of advantages stops at its LAST step (whose advantage is 0).
    carry = next_discount * td_lambda * torch.cat([valid[1:], torch.zeros_like(valid[:1])])
    advantages = torch.empty_like(deltas)
    acc = torch.zeros_like(deltas[0])
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + carry[t] * acc
        advantages[t] = acc
    advantages = advantages * valid
    return advantages, advantages + values[:-1] * valid


def n_step_return(
    *,
    rewards: torch.Tensor,
    discounts: torch.Tensor,
    step_types: torch.Tensor,
    values: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """The n-step return target of row 0 of ``[n+1, B]`` sampled sequences.

    ``G = sum_{k=1..m} gamma^(k-1) (prod_{j<k} d_j) r_k + gamma^m (prod_{j<=m} d_j) V_m``
    where ``m`` is ``n``, or the first ``k >= 1`` whose step is LAST: the return stops at
    the end of the episode, bootstrapping from the final observation when the episode
    was truncated (discount 1) and not at all when it terminated (discount 0). Row 0
    must not be LAST (such a row starts no transition; mask it out of the loss).

    Args:
        rewards: ``[n+1, B]`` as stored (row ``k`` holds the reward of arriving at step
            ``k``).
        discounts: ``[n+1, B]`` as stored (row ``k`` holds the discount of arriving at
            step ``k``).
        step_types: ``[n+1, B]`` as stored.
        values: ``[n+1, B]`` bootstrap values of each row's observation (row 0 unused).
        gamma: discount factor.

    Returns:
        ``[B]`` targets.
    """
    n = rewards.shape[0] - 1
    if n < 1:
        raise ValueError("n_step_return needs sequences of at least 2 steps")
    if n == 1:  # the one-step TD target, without the loop's bookkeeping
        return rewards[1] + gamma * discounts[1] * values[1]
    ret = torch.zeros_like(rewards[0])
    scale = torch.ones_like(rewards[0])
    target = torch.zeros_like(rewards[0])
    done = torch.zeros_like(rewards[0], dtype=torch.bool)
    for k in range(1, n + 1):
        ret = torch.where(done, ret, ret + scale * rewards[k])
        scale = torch.where(done, scale, scale * gamma * discounts[k])
        end = ~done & ((step_types[k] == StepType.LAST) | (k == n))
        target = torch.where(end, ret + scale * values[k], target)
        done = done | end
    return target


def vtrace(
    *,
    rewards: torch.Tensor,
    values: torch.Tensor,
    step_types: torch.Tensor,
    discounts: torch.Tensor,
    log_rhos: torch.Tensor,
    gamma: float,
    td_lambda: float = 1.0,
    clip_rho: float = 1.0,
    clip_c: float = 1.0,
    clip_pg_rho: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V-trace targets and policy-gradient advantages (Espeholt et al., 2018).

    With importance ratios ``r_t = pi(a_t|x_t) / mu(a_t|x_t)`` (``log_rhos``),
    ``rho_t = min(clip_rho, r_t)`` and ``c_t = td_lambda * min(clip_c, r_t)``:
    ``delta_t = rho_t (R_{t+1} + gamma d_{t+1} V_{t+1} - V_t)`` and
    ``v_t - V_t = delta_t + gamma d_{t+1} c_t (v_{t+1} - V_{t+1})``, with ``v_T = V_T``.
    Rows that are LAST start no transition: their correction is 0 and the recursion does
    not reach across them (as in :func:`generalized_advantage_estimation`, which this
    equals when every ratio is 1). The advantage is
    ``min(clip_pg_rho, r_t) (R_{t+1} + gamma d_{t+1} v_{t+1} - V_t)``, 0 on LAST rows.

    Args:
        rewards: ``[T+1, B]`` time-major tensor.
        values: ``[T+1, B]`` time-major tensor.
        step_types: ``[T+1, B]`` time-major tensor.
        discounts: ``[T+1, B]`` time-major tensor.
        log_rhos: ``[T, B]`` (or ``[T+1, B]``, last row unused) log importance ratios.
        gamma: discount factor.
        td_lambda: lambda of the traces.
        clip_rho: truncation level of the importance weights of the value targets.
        clip_c: truncation level of the trace coefficients.
        clip_pg_rho: truncation level of the policy-gradient importance weights.

    Returns:
        ``(vs, advantages)``, both ``[T, B]``.
    """
    valid = valid_mask(step_types)
    num_steps = valid.shape[0]
    ratios = log_rhos[:num_steps].exp()
    rhos = ratios.clamp(max=clip_rho)
    cs = td_lambda * ratios.clamp(max=clip_c)
    next_discount = gamma * discounts[1:]
    deltas = rhos * (rewards[1:] + next_discount * values[1:] - values[:-1]) * valid
    carry = next_discount * cs * torch.cat([valid[1:], torch.zeros_like(valid[:1])])
    corrections = torch.empty_like(deltas)
    acc = torch.zeros_like(deltas[0])
    for t in range(num_steps - 1, -1, -1):
        acc = deltas[t] + carry[t] * acc
        corrections[t] = acc
    corrections = corrections * valid
    vs = values[:-1] + corrections
    # v_{t+1}; on a LAST row t+1 it is V_{t+1} (no correction), and v_T = V_T.
    next_vs = torch.cat([vs[1:], values[-1:]])
    pg_rhos = ratios.clamp(max=clip_pg_rho)
    advantages = pg_rhos * (rewards[1:] + next_discount * next_vs - values[:-1]) * valid
    return vs, advantages
