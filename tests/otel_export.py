"""Exports a gauge, a counter and a histogram with the OpenTelemetry Python SDK over OTLP/gRPC
or OTLP/HTTP (protobuf).

Used by tests/cli/otlp_sdk.rs (gRPC with --gzip, HTTP plain) against a real `lockstep serve`.

    python3 tests/otel_export.py --endpoint http://127.0.0.1:4317 --token TOKEN [--gzip]
    python3 tests/otel_export.py --protocol http --endpoint http://127.0.0.1:9091/v1/metrics --token TOKEN

Resource: host.name=otel-host, service.name=otel-test. Exits non-zero unless every export
returned SUCCESS.
"""

from __future__ import annotations

import argparse
import sys

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExportResult, PeriodicExportingMetricReader
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource


RESULTS: list = []


def recording(exporter_class):
    """A subclass of `exporter_class` that remembers the result of every export."""

    class Recording(exporter_class):
        def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs):
            result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
            RESULTS.append(result)
            return result

    return Recording


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    ap.add_argument("--gzip", action="store_true", help="compress (the Collector's otlp exporter's default)")
    args = ap.parse_args()

    if args.protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter

        from grpc import Compression

        exporter = recording(OTLPMetricExporter)(
            endpoint=args.endpoint,
            insecure=args.endpoint.startswith("http://"),
            headers=(("authorization", f"Bearer {args.token}"),),
            timeout=10,
            compression=Compression.Gzip if args.gzip else Compression.NoCompression,
        )
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        from opentelemetry.exporter.otlp.proto.http import Compression

        exporter = recording(OTLPMetricExporter)(
            endpoint=args.endpoint,
            headers={"authorization": f"Bearer {args.token}"},
            timeout=10,
            compression=Compression.Gzip if args.gzip else Compression.NoCompression,
        )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(
        resource=Resource.create({"host.name": "otel-host", "service.name": "otel-test"}),
        metric_readers=[reader],
        views=[View(instrument_name="lockstep_test_latency",
                    aggregation=ExplicitBucketHistogramAggregation(boundaries=[1.0, 5.0, 10.0]))],
    )
    meter = provider.get_meter("lockstep-test")

    def gpu_util(_options: CallbackOptions):
        yield Observation(42.5, {"gpu": "3"})

    meter.create_observable_gauge("lockstep.test.gpu_util", callbacks=[gpu_util])
    counter = meter.create_counter("lockstep.test.requests")
    counter.add(5, {"route": "/write"})
    counter.add(2, {"route": "/write"})
    hist = meter.create_histogram("lockstep_test_latency")
    for v in (0.3, 3.0, 30.0):
        hist.record(v)

    provider.force_flush()
    provider.shutdown()
    results = RESULTS
    print(f"exports: {[r.name for r in results]}")
    if not results or any(r != MetricExportResult.SUCCESS for r in results):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
