"""TD3: DDPG with twin critics, target-policy smoothing and delayed actor updates."""

from __future__ import annotations

from typing import Any

from alf.algorithms.ddpg import DdpgAlgorithm
from alf.config import configurable

__all__ = ["Td3Algorithm"]


@configurable
class Td3Algorithm(DdpgAlgorithm):
    """TD3 (Fujimoto et al., 2018): :class:`DdpgAlgorithm` with two critics whose minimum
    forms the targets, clipped Gaussian noise on the target action, and an actor (and
    target-network) update every second critic update.

    Args:
        num_critic_replicas: number of critics (2).
        target_policy_noise: std of the target-action noise, in half action ranges (0.2).
        target_policy_noise_clip: clip of that noise (0.5).
        actor_update_period: critic updates per actor update (2).
        **kwargs: :class:`DdpgAlgorithm` arguments.
    """

    def __init__(
        self,
        *,
        num_critic_replicas: int = 2,
        target_policy_noise: float = 0.2,
        target_policy_noise_clip: float = 0.5,
        actor_update_period: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            num_critic_replicas=num_critic_replicas,
            target_policy_noise=target_policy_noise,
            target_policy_noise_clip=target_policy_noise_clip,
            actor_update_period=actor_update_period,
            **kwargs,
        )
