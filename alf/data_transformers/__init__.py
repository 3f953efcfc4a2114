"""Data transformers: observation and reward preprocessing shared by collection and training.

A transformer is applied in two places, with the same result for the same step:

- on the policy's path (:meth:`DataTransformer.transform_timestep`): each time step the
  unrollers, the evaluator and ``play`` give to ``rollout_step``/``predict_step``;
- on training batches (:meth:`DataTransformer.transform_experience`): the unrolled
  trajectory of an on-policy algorithm, or a mini-batch sampled from a replay buffer.

Collected experience (the replay buffer, the actors' fragments) always holds the *raw*
time steps: stacked frames are never stored, and a normalizer's statistics can change
without invalidating stored data. A transformer that needs earlier steps (the
:class:`FrameStacker`) declares :attr:`~DataTransformer.history_length`: training batches
then carry that many extra leading rows, which the transformer consumes.

Statistics (:class:`ObservationNormalizer`, :class:`RewardNormalizer`) are buffers of the
algorithm module, so checkpoints save them, a resumed run and ``play`` restore them, and
async actors receive them with the published parameters. They are updated on the learner
only, after transforming a batch (the batch itself is transformed with the statistics the
policy saw while collecting it), from new rollouts (``update_mode="rollout"``) or from
sampled replay batches (``update_mode="replay"``, off-policy algorithms).

Configure them as a list, applied in order::

    TrainerConfig.data_transformer_ctor = [@ImageScale, @FrameStacker]
    FrameStacker.stack_size = 4
"""

from alf.data_transformers.base import (
    UPDATE_MODES,
    DataTransformer,
    DataTransformerChain,
    build_data_transformer,
)
from alf.data_transformers.frames import FrameStacker, ImageScale
from alf.data_transformers.normalizers import ObservationNormalizer, RewardNormalizer, RewardScaling
from alf.data_transformers.running_stats import RunningMeanStd

__all__ = [
    "UPDATE_MODES",
    "DataTransformer",
    "DataTransformerChain",
    "FrameStacker",
    "ImageScale",
    "ObservationNormalizer",
    "RewardNormalizer",
    "RewardScaling",
    "RunningMeanStd",
    "build_data_transformer",
]
