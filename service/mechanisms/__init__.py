"""Pure differential-privacy mechanisms: no I/O, no config, vectorized."""

from service.mechanisms.base import Mechanism
from service.mechanisms.laplace import LaplaceMechanism
from service.mechanisms.randomized_response import RandomizedResponse
from service.mechanisms.rng import NoiseSource, OsEntropy

__all__ = ["LaplaceMechanism", "Mechanism", "NoiseSource", "OsEntropy", "RandomizedResponse"]
