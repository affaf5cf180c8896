"""Offline tools: fits and reports run by hand to produce numbers the runtime packages commit.

Nothing at run time imports this package (the controller, the backtest, the emulator and the
CLI read only what these tools wrote):

- :mod:`llmscale.offline.oom_fit` fits the OOM-risk logistic of :mod:`llmscale.signals.risk` on
  simulated runs (it runs the simulator, which a signal module must not);
- :mod:`llmscale.offline.perf_fit` fits the step-time coefficients
  (``perf/coefficients.json``) to published measurements, ``scripts/fit_perf.py``'s engine;
- :mod:`llmscale.offline.perf_fidelity` scores the fitted model against the end-to-end
  measurements it was not fitted on (``benchmarks/perf_fidelity.py``).
"""

__all__: list[str] = []
