"""The high-dimensional theory (pure numpy/scipy; never imports torch or the simulation layer).

* :mod:`.spectral` -- free convolution with the semicircle, spectral integrals with exact derivatives;
* :mod:`.channel` -- softmax output channel: batched prox, Jacobians, deterministic quadrature;
* :mod:`.state_evolution` -- the fixed-point solver and its result object;
* :mod:`.thresholds` -- interpolation, perfect-recovery and Bayes-optimal thresholds;
* :mod:`.optimal` -- the optimal weight decay per alpha (minimum of the SE test error).
"""

from .api import theory_record, theory_records
from .optimal import optimal_curve, optimal_lambda
from .state_evolution import SEResult, StateEvolution, learning_curve, solve
from .thresholds import Thresholds, thresholds

__all__ = [
    "SEResult",
    "StateEvolution",
    "Thresholds",
    "learning_curve",
    "optimal_curve",
    "optimal_lambda",
    "solve",
    "theory_record",
    "theory_records",
    "thresholds",
]
