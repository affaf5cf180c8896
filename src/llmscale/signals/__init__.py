"""Signals: pure functions from a window of observations to named, validated values.

``compute_signals(window)`` fills every name of :data:`SIGNALS` (the contract
with the policies, in :mod:`llmscale.signals.catalog`); the themed modules
(histograms, rates, kv, queues, gpu, risk, rhythm, predictors, diagnostics)
hold the formulas, each with the design-document section it implements.
"""

from __future__ import annotations

from llmscale.signals.catalog import SIGNALS
from llmscale.signals.fleet import compute_signals
from llmscale.signals.histograms import histogram_quantile
from llmscale.signals.predictors import predictor_errors, predictor_records

__all__ = ["SIGNALS", "compute_signals", "histogram_quantile", "predictor_errors", "predictor_records"]
