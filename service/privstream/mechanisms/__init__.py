"""Pure differential-privacy mechanisms: no I/O, no config, vectorized."""

from privstream.mechanisms.base import Mechanism
from privstream.mechanisms.laplace import LaplaceMechanism
from privstream.mechanisms.randomized_response import RandomizedResponse
from privstream.mechanisms.rng import NoiseSource, OsEntropy

__all__ = ["LaplaceMechanism", "Mechanism", "NoiseSource", "OsEntropy", "RandomizedResponse"]
