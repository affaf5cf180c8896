"""The ``llmscale`` command line: wiring only; the work lives in the packages it calls.

One module per command group (``backtest``, ``tune``, ``run``, ``emulate``, ``loadgen``,
``calibrate``, ``analyze`` with ``diagnose``, ``tenants``, ``node_check``, ``catalogue`` for
``policies`` and ``workloads``); the options several commands share in :mod:`llmscale.cli.options`;
logging, environment variables and ``--json`` writing in :mod:`llmscale.cli.common`; the app and
:func:`main` in :mod:`llmscale.cli.app`.
"""

from __future__ import annotations

from llmscale.cli.app import app, main

__all__ = ["app", "main"]
