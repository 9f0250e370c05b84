"""Candidate-scoring actor-critic policy for sb3-contrib's MaskablePPO.

The env offers K candidate actions (queue job x placement rule, plus WAIT), one row of F
scaled features each, beside D global features and a validity mask. One small network scores
every row with shared weights, so no parameter depends on K: a policy trained with one queue
window or cluster runs unchanged on another with the same F and D.

Network, per observation:
    h_k      = encoder([candidate_k, global])                        (K, d_model)
    h        = n_layers x self-attention over valid candidates       (K, d_model)
    pooled   = [masked mean of h, masked max of h]                   (2 d_model,)
    logit_k  = score_head([h_k, pooled])                             (K,)
    value    = value_head([pooled, global])                          (1,)

Nothing a valid row's logit or the value depends on comes from an invalid row, so with
`packed=True` the scorer computes only the valid rows: the per-row layers run on the batch's
valid rows, flattened, and attention on each observation's valid rows moved to the front. The
same function, in other floating-point order (valid logits and values within ~1e-6 of the dense
pass); a typical decision has 4-7 valid rows of 41, so a PPO update of ppo.yaml is 2.6-4.2x
faster on CPU (docs/performance.md, *Speed today*).
Invalid rows' logits are 0 there (they are masked before sampling in both passes).
"""

from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import MaskableCategoricalDistribution
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule
from stable_baselines3.common.utils import obs_as_tensor
from torch import nn

from envs.decision.features import FEATURE_SCHEMA_VERSION, NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES

CANDIDATES_KEY = "candidates"
GLOBAL_KEY = "global"
MASK_KEY = "action_mask"


def _mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, activation_fn: type[nn.Module]) -> nn.Sequential:
    """Linear layers of widths in_dim -> *hidden -> out_dim, activation between (not after) them."""
    widths = (in_dim, *hidden)
    layers: list[nn.Module] = []
    for w_in, w_out in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(w_in, w_out), activation_fn()]
    layers.append(nn.Linear(widths[-1], out_dim))
    return nn.Sequential(*layers)


class CandidateScorer(nn.Module):
    """Shared-weight scorer of a variable number K of candidates (plain torch, no SB3).

    Exported as is for serving: ``forward`` takes the mask as an explicit input.
    """

    def __init__(
        self,
        candidate_dim: int,
        global_dim: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        encoder_hidden: tuple[int, ...] = (128,),
        head_hidden: tuple[int, ...] = (64,),
        value_hidden: tuple[int, ...] = (64,),
        ffn_dim: int | None = None,
        dropout: float = 0.0,
        activation_fn: type[nn.Module] = nn.ReLU,
        packed: bool = False,
    ):
        """candidate_dim F and global_dim D are feature widths; ffn_dim defaults to 2 d_model;
        `packed`: compute only the valid rows (module docstring)."""
        super().__init__()
        self.packed = packed
        if n_layers > 0 and d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        self.encoder = _mlp(candidate_dim + global_dim, encoder_hidden, d_model, activation_fn)
        # A ModuleList rather than nn.TransformerEncoder: the latter turns padded batches into
        # nested tensors in eval mode, which makes rollout and training passes differ.
        self.attention = nn.ModuleList(
            nn.TransformerEncoderLayer(
                d_model,
                n_heads,
                dim_feedforward=ffn_dim or 2 * d_model,
                dropout=dropout,
                activation=activation_fn(),
                batch_first=True,
                norm_first=True,
            )
            for _ in range(n_layers)
        )
        # Pre-norm layers leave the residual stream unnormalised; close it like a pre-norm stack.
        self.final_norm = nn.LayerNorm(d_model) if n_layers > 0 else nn.Identity()
        self.score_head = _mlp(3 * d_model, head_hidden, 1, activation_fn)
        self.value_head = _mlp(2 * d_model + global_dim, value_hidden, 1, activation_fn)

    def encode(
        self, candidates: th.Tensor, global_features: th.Tensor, mask: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """Candidate embeddings in context and the pooled set context.

        candidates (B, K, F) float, global_features (B, D) float, mask (B, K) bool (True = valid)
        -> h (B, K, d_model), pooled (B, 2 d_model).
        """
        # A row with no valid candidate would make attention softmax over nothing (NaN); let it
        # attend to all rows instead: its logits are all masked anyway.
        context_mask = mask | ~mask.any(dim=1, keepdim=True)
        n_candidates = candidates.shape[1]
        global_rows = global_features.unsqueeze(1).expand(-1, n_candidates, -1)
        h = self.encoder(th.cat([candidates, global_rows], dim=-1))
        for layer in self.attention:
            h = layer(h, src_key_padding_mask=~context_mask)
        h = self.final_norm(h)
        weights = context_mask.unsqueeze(-1).to(h.dtype)
        mean = (h * weights).sum(dim=1) / weights.sum(dim=1)
        maximum = h.masked_fill(~context_mask.unsqueeze(-1), th.finfo(h.dtype).min).amax(dim=1)
        return h, th.cat([mean, maximum], dim=-1)

    def logits(self, h: th.Tensor, pooled: th.Tensor) -> th.Tensor:
        """h (B, K, d_model), pooled (B, 2 d_model) -> unmasked logits (B, K)."""
        pooled_rows = pooled.unsqueeze(1).expand(-1, h.shape[1], -1)
        return self.score_head(th.cat([h, pooled_rows], dim=-1)).squeeze(-1)

    def value(self, pooled: th.Tensor, global_features: th.Tensor) -> th.Tensor:
        """pooled (B, 2 d_model), global_features (B, D) -> state value (B, 1)."""
        return self.value_head(th.cat([pooled, global_features], dim=-1))

    def forward(
        self, candidates: th.Tensor, global_features: th.Tensor, mask: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """Shapes as in ``encode`` -> (logits (B, K), value (B, 1)).

        Logits of invalid rows are not forced down here; mask them before sampling or ranking.
        """
        if self.packed:
            return self.forward_packed(candidates, global_features, mask)
        return self.forward_dense(candidates, global_features, mask)

    def forward_dense(
        self, candidates: th.Tensor, global_features: th.Tensor, mask: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """``forward`` over every row, valid or not (what is exported for serving)."""
        h, pooled = self.encode(candidates, global_features, mask)
        return self.logits(h, pooled), self.value(pooled, global_features)

    def forward_packed(
        self, candidates: th.Tensor, global_features: th.Tensor, mask: th.Tensor
    ) -> tuple[th.Tensor, th.Tensor]:
        """``forward`` over the valid rows only (invalid rows' logits are 0): the per-row layers
        on the N valid rows of the batch, flattened; attention on (B, K', d_model), each
        observation's valid rows first, K' the most valid rows of any observation. The
        parameters are those of the dense pass (the encoder layers' own), so a model can switch."""
        context = mask | ~mask.any(dim=1, keepdim=True)  # as in `encode`
        n_obs, n_candidates = context.shape
        counts = context.sum(dim=1)
        width = int(counts.max()) if n_obs else 0
        order = th.argsort((~context).to(th.int8), dim=1, stable=True)[:, :width]  # valid rows first
        front = th.gather(context, 1, order)  # (B, K') which front slots hold a valid row
        at = front.nonzero(as_tuple=True)  # the valid rows' (observation, front slot)
        obs_of, row_of = at[0], order[at]  # ... and their observation and row in the input
        x = self.encoder(th.cat([candidates[obs_of, row_of], global_features[obs_of]], dim=-1))  # (N, d_model)
        d_model = x.shape[-1]
        for layer in self.attention:  # nn.TransformerEncoderLayer(norm_first=True), row by row where it can
            mha = layer.self_attn
            qkv = nn.functional.linear(layer.norm1(x), mha.in_proj_weight, mha.in_proj_bias)
            slots = x.new_zeros(n_obs, width, 3 * d_model)
            slots[at] = qkv
            heads = mha.num_heads
            q, k, v = (t.reshape(n_obs, width, heads, d_model // heads).transpose(1, 2) for t in slots.split(d_model, dim=-1))
            attended = nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=front[:, None, None, :], dropout_p=mha.dropout if self.training else 0.0)
            attended = attended.transpose(1, 2).reshape(n_obs, width, d_model)[at]
            x = x + layer.dropout1(mha.out_proj(attended))
            x = x + layer.dropout2(layer.linear2(layer.dropout(layer.activation(layer.linear1(layer.norm2(x))))))
        x = self.final_norm(x)
        mean = x.new_zeros(n_obs, d_model).index_add_(0, obs_of, x) / counts.to(x.dtype).unsqueeze(-1)
        padded = x.new_full((n_obs, width, d_model), th.finfo(x.dtype).min)
        padded[at] = x
        pooled = th.cat([mean, padded.amax(dim=1)], dim=-1)
        logits = x.new_zeros(n_obs, n_candidates)
        logits[obs_of, row_of] = self.score_head(th.cat([x, pooled[obs_of]], dim=-1)).squeeze(-1)
        return logits, self.value(pooled, global_features)


def observation_dims(observation_space: spaces.Space, action_space: spaces.Space) -> tuple[int, int]:
    """Check the env's observation contract and return (F, D): candidate and global widths."""
    if not isinstance(observation_space, spaces.Dict) or set(observation_space.spaces) != {
        CANDIDATES_KEY,
        GLOBAL_KEY,
        MASK_KEY,
    }:
        raise ValueError(
            f"expected a Dict observation space with keys {CANDIDATES_KEY!r}, {GLOBAL_KEY!r}, "
            f"{MASK_KEY!r}; got {observation_space}"
        )
    candidates = observation_space[CANDIDATES_KEY]
    global_features = observation_space[GLOBAL_KEY]
    if not isinstance(candidates, spaces.Box) or len(candidates.shape) != 2:
        raise ValueError(f"{CANDIDATES_KEY!r} must be a Box of shape (K, F); got {candidates}")
    if not isinstance(global_features, spaces.Box) or len(global_features.shape) != 1:
        raise ValueError(f"{GLOBAL_KEY!r} must be a Box of shape (D,); got {global_features}")
    n_candidates = candidates.shape[0]
    if not isinstance(action_space, spaces.Discrete) or int(action_space.n) != n_candidates:
        raise ValueError(f"action space must be Discrete({n_candidates}), one action per candidate; got {action_space}")
    return candidates.shape[1], global_features.shape[0]


class CandidateScoringPolicy(MaskableActorCriticPolicy):
    """MaskablePPO policy whose logits are per-candidate scores from a ``CandidateScorer``.

    Every hyper-parameter is a ``policy_kwargs`` entry (see ``CandidateScorer``). K may differ
    from the spaces the policy was built with: ``predict`` accepts observations of any K, and
    ``MaskablePPO.load(path, custom_objects={"observation_space": ..., "action_space": ...})``
    rebuilds a saved model for an env with another K. The mask applied to the distribution is
    the observation's ``action_mask``, ANDed with ``action_masks`` when one is passed, so an
    invalid candidate is never chosen even by a caller that forgets ``action_masks``.
    """

    def __init__(
        self,
        observation_space: spaces.Dict,
        action_space: spaces.Discrete,
        lr_schedule: Schedule,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        encoder_hidden: tuple[int, ...] = (128,),
        head_hidden: tuple[int, ...] = (64,),
        value_hidden: tuple[int, ...] = (64,),
        ffn_dim: int | None = None,
        dropout: float = 0.0,
        activation_fn: type[nn.Module] = nn.ReLU,
        packed: bool = False,
        ortho_init: bool = True,
        optimizer_class: type[th.optim.Optimizer] = th.optim.Adam,
        optimizer_kwargs: dict[str, Any] | None = None,
        feature_schema_version: int = FEATURE_SCHEMA_VERSION,
    ):
        if feature_schema_version != FEATURE_SCHEMA_VERSION:
            raise ValueError(schema_mismatch(feature_schema_version))
        candidate_dim, global_dim = observation_dims(observation_space, action_space)
        if optimizer_kwargs is None:
            # SB3's default for Adam in actor-critic policies, against NaNs.
            optimizer_kwargs = {"eps": 1e-5} if optimizer_class is th.optim.Adam else {}
        # Skip MaskableActorCriticPolicy.__init__: it builds a flatten extractor and an action
        # layer sized by K, both of which the scorer replaces.
        BasePolicy.__init__(
            self,
            observation_space,
            action_space,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
            normalize_images=False,
            squash_output=False,
        )
        self.scorer_kwargs: dict[str, Any] = dict(
            d_model=d_model,
            n_heads=n_heads,
            n_layers=n_layers,
            encoder_hidden=tuple(encoder_hidden),
            head_hidden=tuple(head_hidden),
            value_hidden=tuple(value_hidden),
            ffn_dim=ffn_dim,
            dropout=dropout,
            activation_fn=activation_fn,
            packed=packed,
        )
        self.ortho_init = ortho_init
        self.feature_schema_version = feature_schema_version
        self.candidate_dim = candidate_dim
        self.global_dim = global_dim
        self.scorer = CandidateScorer(candidate_dim, global_dim, **self.scorer_kwargs)
        if ortho_init:
            # SB3's gains: sqrt(2) for hidden layers, 0.01 for the action logits (near-uniform
            # first policy), 1 for the value output.
            self.scorer.apply(lambda module: self.init_weights(module, gain=np.sqrt(2)))
            self.init_weights(self.scorer.score_head[-1], gain=0.01)
            self.init_weights(self.scorer.value_head[-1], gain=1.0)
        self.optimizer = self.optimizer_class(self.parameters(), lr=lr_schedule(1), **self.optimizer_kwargs)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return dict(
            observation_space=self.observation_space,
            action_space=self.action_space,
            lr_schedule=self._dummy_schedule,
            ortho_init=self.ortho_init,
            optimizer_class=self.optimizer_class,
            optimizer_kwargs=self.optimizer_kwargs,
            feature_schema_version=self.feature_schema_version,
            **self.scorer_kwargs,
        )

    def _split(self, obs: PyTorchObs) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Dict observation -> candidates (B, K, F), global (B, D) float; mask (B, K) bool."""
        return obs[CANDIDATES_KEY].float(), obs[GLOBAL_KEY].float(), obs[MASK_KEY].bool()

    def _distribution(
        self, logits: th.Tensor, mask: th.Tensor, action_masks: th.Tensor | np.ndarray | None
    ) -> MaskableCategoricalDistribution:
        """Masked categorical over this batch's K candidates (not the K the policy was built with)."""
        if action_masks is not None:
            mask = mask & th.as_tensor(action_masks, dtype=th.bool, device=mask.device).reshape(mask.shape)
        distribution = MaskableCategoricalDistribution(logits.shape[-1]).proba_distribution(logits)
        distribution.apply_masking(mask)
        return distribution

    def forward(
        self, obs: PyTorchObs, deterministic: bool = False, action_masks: np.ndarray | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor]:
        """Rollout step -> actions (B,), values (B, 1), log-probabilities (B,)."""
        candidates, global_features, mask = self._split(obs)
        logits, values = self.scorer(candidates, global_features, mask)
        distribution = self._distribution(logits, mask, action_masks)
        actions = distribution.get_actions(deterministic=deterministic)
        return actions, values, distribution.log_prob(actions)

    def evaluate_actions(
        self, obs: th.Tensor, actions: th.Tensor, action_masks: th.Tensor | None = None
    ) -> tuple[th.Tensor, th.Tensor, th.Tensor | None]:
        """PPO update -> values (B, 1), log-probabilities (B,), entropies (B,) of ``actions``."""
        candidates, global_features, mask = self._split(obs)
        logits, values = self.scorer(candidates, global_features, mask)
        distribution = self._distribution(logits, mask, action_masks)
        return values, distribution.log_prob(actions), distribution.entropy()

    def get_distribution(
        self, obs: PyTorchObs, action_masks: np.ndarray | None = None
    ) -> MaskableCategoricalDistribution:
        """Masked action distribution (the scorer's pass, dense or packed)."""
        candidates, global_features, mask = self._split(obs)
        logits, _ = self.scorer(candidates, global_features, mask)
        return self._distribution(logits, mask, action_masks)

    def predict_values(self, obs: PyTorchObs) -> th.Tensor:
        """State values (B, 1) (the scorer's pass, dense or packed)."""
        candidates, global_features, mask = self._split(obs)
        return self.scorer(candidates, global_features, mask)[1]

    def obs_to_tensor(self, observation: dict[str, np.ndarray]) -> tuple[PyTorchObs, bool]:  # type: ignore[override]
        """SB3's conversion, except that K may differ from the policy's observation space.

        Returns the batched tensors and whether ``observation`` was already batched.
        """
        if not isinstance(observation, dict):
            raise ValueError(f"expected a dict observation with keys {sorted(self.observation_space.spaces)}")
        vectorized = np.ndim(observation[CANDIDATES_KEY]) == 3
        arrays = {key: np.asarray(observation[key]) for key in (CANDIDATES_KEY, GLOBAL_KEY, MASK_KEY)}
        if not vectorized:
            arrays = {key: array[np.newaxis] for key, array in arrays.items()}
        candidates = arrays[CANDIDATES_KEY]
        n_obs, n_candidates = candidates.shape[:2]
        expected = {
            CANDIDATES_KEY: (n_obs, n_candidates, self.candidate_dim),
            GLOBAL_KEY: (n_obs, self.global_dim),
            MASK_KEY: (n_obs, n_candidates),
        }
        for key, shape in expected.items():
            if arrays[key].shape != shape:
                raise ValueError(f"observation[{key!r}] has shape {arrays[key].shape}; expected {shape}")
        return obs_as_tensor(arrays, self.device), vectorized


def schema_mismatch(version: int | None) -> str:
    recorded = "no feature schema version (a model of schema 1)" if version is None else f"feature schema version {version}"
    return (f"the model was trained on {recorded}, but this code computes feature schema version "
            f"{FEATURE_SCHEMA_VERSION} (envs.decision.features): its inputs would be misread; retrain it with this code")


def load_model(path, **kwargs):
    """`MaskablePPO.load` that refuses a model trained on another feature schema: a
    `CandidateScoringPolicy` records the version it was trained on in its `policy_kwargs`
    (models from before the record are schema 1); another policy class must at least expect the
    current feature sizes. Raises ValueError naming the file."""
    from sb3_contrib import MaskablePPO

    try:
        model = MaskablePPO.load(path, **kwargs)
    except ValueError as e:
        if "feature schema" in str(e):
            raise ValueError(f"{path}: {e}") from None
        raise
    if isinstance(model.policy, CandidateScoringPolicy):
        version = model.policy_kwargs.get("feature_schema_version")
        if version != FEATURE_SCHEMA_VERSION:
            raise ValueError(f"{path}: {schema_mismatch(version)}")
    else:  # another policy class records no version: its input sizes must at least match
        space = model.observation_space
        dims = (space[CANDIDATES_KEY].shape[-1], space[GLOBAL_KEY].shape[-1]) if isinstance(space, spaces.Dict) else None
        if dims != (NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES):
            raise ValueError(f"{path}: the model's observation has {dims} (candidate, global) features, this code computes "
                             f"{(NUM_CANDIDATE_FEATURES, NUM_GLOBAL_FEATURES)} (feature schema version {FEATURE_SCHEMA_VERSION}); retrain it")
    return model
