"""Intrinsic rewards (curiosity bonuses) for exploration when rewards are sparse.

* :class:`RNDReward`: random network distillation (Burda et al., 2018);
* :class:`ICMReward`: the intrinsic curiosity module (Pathak et al., 2017).

They are components: an algorithm holds one (``PPOAlgorithm.intrinsic_reward_ctor =
@RNDReward``; APPO, A2C and SAC alike) and trains it with its own loss. See
``docs/exploration.md``.
"""

from alf.algorithms.intrinsic.base import IntrinsicReward, IntrinsicRewardError
from alf.algorithms.intrinsic.critic import (
    IntrinsicCritic,
    IntrinsicTargets,
    IntrinsicTrainInfo,
)
from alf.algorithms.intrinsic.icm import ICMReward
from alf.algorithms.intrinsic.normalizers import ReturnNormalizer, RunningMeanStd
from alf.algorithms.intrinsic.rnd import RNDReward

__all__ = [
    "ICMReward",
    "IntrinsicCritic",
    "IntrinsicReward",
    "IntrinsicRewardError",
    "IntrinsicTargets",
    "IntrinsicTrainInfo",
    "RNDReward",
    "ReturnNormalizer",
    "RunningMeanStd",
]
