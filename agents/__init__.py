"""The learned scheduler: policy network, device selection, PPO set-up."""

from agents.device import resolve_device
from agents.policy import CandidateScorer, CandidateScoringPolicy

__all__ = ["CandidateScorer", "CandidateScoringPolicy", "resolve_device"]
