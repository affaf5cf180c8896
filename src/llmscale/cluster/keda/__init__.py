"""KEDA external scaler: llmscale's decision served over KEDA's ``externalscaler`` gRPC protocol.

``externalscaler.proto`` is KEDA's wire contract; ``externalscaler_pb2*`` are generated from it by
``scripts/gen_proto.sh`` (never edit them by hand); ``server.py`` serves the decision.
"""

from llmscale.cluster.keda.server import (
    DEFAULT_METRIC_NAME,
    METRIC_NAME_KEY,
    ExternalScalerServicer,
    KedaScaler,
    KedaServer,
    ServerTls,
    serve,
)

__all__ = [
    "DEFAULT_METRIC_NAME",
    "METRIC_NAME_KEY",
    "ExternalScalerServicer",
    "KedaScaler",
    "KedaServer",
    "ServerTls",
    "serve",
]
