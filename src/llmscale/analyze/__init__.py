"""Offline analyses of a controller's decision log or a Prometheus range (``llmscale analyze``,
``llmscale diagnose``). scikit-learn and statsmodels are imported only by the analyses that use them."""

from llmscale.analyze.knee import Knee, find_knee, latency_cliff_rps_per_replica
from llmscale.analyze.log import TickTable, read_decision_log

__all__ = ["Knee", "TickTable", "find_knee", "latency_cliff_rps_per_replica", "read_decision_log"]
