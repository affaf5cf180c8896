"""The committed protobuf/gRPC modules are what scripts/gen_proto.sh makes of externalscaler.proto,
and the proto still speaks KEDA's wire contract (names, field numbers, types)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor

from llmscale.cluster.keda import externalscaler_pb2 as pb
from llmscale.cluster.keda import externalscaler_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parents[2]
KEDA_DIR = REPO / "src" / "llmscale" / "cluster" / "keda"
GENERATED = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


def test_committed_modules_match_a_fresh_generation(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "gen_proto.sh"), str(out)],
        env={**os.environ, "PYTHON": sys.executable},
        timeout=120,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"scripts/gen_proto.sh failed:\n{done.stderr}"
    for name in GENERATED:
        fresh = (out / name).read_text()
        committed = (KEDA_DIR / name).read_text()
        assert fresh == committed, (
            f"{name} differs from what externalscaler.proto generates; run scripts/gen_proto.sh "
            "(or the installed grpcio-tools differs from the one that generated the committed files)"
        )


def test_grpc_module_imports_its_messages_relatively() -> None:
    text = (KEDA_DIR / "externalscaler_pb2_grpc.py").read_text()
    assert "from . import externalscaler_pb2 as externalscaler__pb2" in text
    assert pb_grpc.externalscaler__pb2 is pb


# KEDA's contract, as kedacore/keda pkg/scalers/externalscaler/externalscaler.proto defines it:
# (message, field, number, type, repeated).
T = FieldDescriptor
KEDA_FIELDS = [
    ("ScaledObjectRef", "name", 1, T.TYPE_STRING, False),
    ("ScaledObjectRef", "namespace", 2, T.TYPE_STRING, False),
    ("ScaledObjectRef", "scalerMetadata", 3, T.TYPE_MESSAGE, True),  # map<string, string>
    ("IsActiveResponse", "result", 1, T.TYPE_BOOL, False),
    ("GetMetricSpecResponse", "metricSpecs", 1, T.TYPE_MESSAGE, True),
    ("MetricSpec", "metricName", 1, T.TYPE_STRING, False),
    ("MetricSpec", "targetSize", 2, T.TYPE_INT64, False),
    ("MetricSpec", "targetSizeFloat", 3, T.TYPE_DOUBLE, False),
    ("GetMetricsRequest", "scaledObjectRef", 1, T.TYPE_MESSAGE, False),
    ("GetMetricsRequest", "metricName", 2, T.TYPE_STRING, False),
    ("GetMetricsResponse", "metricValues", 1, T.TYPE_MESSAGE, True),
    ("MetricValue", "metricName", 1, T.TYPE_STRING, False),
    ("MetricValue", "metricValue", 2, T.TYPE_INT64, False),
    ("MetricValue", "metricValueFloat", 3, T.TYPE_DOUBLE, False),
]


@pytest.mark.parametrize(
    ("message", "field", "number", "type_", "repeated"),
    [pytest.param(*row, id=f"{row[0]}.{row[1]}") for row in KEDA_FIELDS],
)
def test_wire_fields_are_kedas(message: str, field: str, number: int, type_: int, repeated: bool) -> None:
    fd = pb.DESCRIPTOR.message_types_by_name[message].fields_by_name[field]
    assert (fd.number, fd.type) == (number, type_)
    assert fd.is_repeated is repeated


def test_every_field_is_in_the_contract() -> None:
    declared = {(m, f) for m, f, *_ in KEDA_FIELDS}
    generated = {(m.name, f.name) for m in pb.DESCRIPTOR.message_types_by_name.values() for f in m.fields}
    assert generated == declared


def test_scaler_metadata_is_a_string_map() -> None:
    entry = pb.ScaledObjectRef.DESCRIPTOR.fields_by_name["scalerMetadata"].message_type
    assert entry.GetOptions().map_entry
    assert [(f.name, f.type) for f in entry.fields] == [("key", T.TYPE_STRING), ("value", T.TYPE_STRING)]


def test_service_is_kedas() -> None:
    assert pb.DESCRIPTOR.package == "externalscaler"
    service = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    methods = {
        m.name: (m.input_type.name, m.output_type.name, m.server_streaming, m.client_streaming)
        for m in service.methods
    }
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False, False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True, False),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False, False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False, False),
    }
