"""Request counts, errors, latency and batch sizes, in Prometheus' text exposition format (version 0.0.4).

Served at GET /monitoring/prometheus/metrics, as TF Serving does with
--monitoring_config_file. The request metrics keep TF Serving's names:

    :tensorflow:serving:request_count{model_name, API, status}       counter; status is OK or the error code
    :tensorflow:serving:request_latency{model_name, API, entrypoint}  histogram, in microseconds

and four of tfrl's own show what dynamic batching did, what is running, and which clients were cut off:

    :tfrl:serving:model_calls{model_name, signature}                   counter of model calls
    :tfrl:serving:batch_size{model_name, signature}                    histogram of rows per model call
    :tfrl:serving:predicts_in_flight{model_name}                       gauge: predict requests being answered
    :tfrl:serving:connections_closed{reason}                           counter: max_connections,
                                                                       max_pending_per_client, header_timeout,
                                                                       body_timeout

Everything is updated from the serving event loop only, so no locks. Written by
hand: five metrics do not need prometheus_client.
"""

from __future__ import annotations

import bisect
import collections

LATENCY_BUCKETS_US = (50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 1_000_000,
                      5_000_000)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

REQUEST_COUNT = ":tensorflow:serving:request_count"
REQUEST_LATENCY = ":tensorflow:serving:request_latency"
MODEL_CALLS = ":tfrl:serving:model_calls"
BATCH_SIZE = ":tfrl:serving:batch_size"
PREDICTS_IN_FLIGHT = ":tfrl:serving:predicts_in_flight"
CONNECTIONS_CLOSED = ":tfrl:serving:connections_closed"

Labels = tuple[tuple[str, str], ...]


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one: above every bucket (+Inf only)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value


class ServerMetrics:
    def __init__(self):
        self._counters: dict[str, dict[Labels, int]] = collections.defaultdict(dict)
        self._histograms: dict[str, dict[Labels, _Histogram]] = collections.defaultdict(dict)
        self._help = {
            REQUEST_COUNT: ("counter", "REST requests, by model, API and outcome."),
            REQUEST_LATENCY: ("histogram", "REST request latency in microseconds, body read to answer sent."),
            MODEL_CALLS: ("counter", "Model calls (one per batch when batching)."),
            BATCH_SIZE: ("histogram", "Rows per model call."),
            PREDICTS_IN_FLIGHT: ("gauge", "Predict requests routed to a version and not answered yet."),
            CONNECTIONS_CLOSED: ("counter", "Client connections the server closed: to stay within "
                                            "--max_connections or --max_pending_connections_per_client, or "
                                            "headers or a body slower than --header_timeout_seconds and "
                                            "--min_body_bytes_per_second."),
        }
        self._buckets = {REQUEST_LATENCY: LATENCY_BUCKETS_US, BATCH_SIZE: BATCH_SIZE_BUCKETS}
        self._request_labels: dict[tuple[str, str, str], tuple[Labels, Labels]] = {}

    def request(self, model_name: str, api: str, status: str, latency_us: float) -> None:
        labels = self._request_labels.get((model_name, api, status))
        if labels is None:  # label tuples made once per combination: this runs for every request
            labels = self._request_labels[model_name, api, status] = (
                (("model_name", model_name), ("API", api), ("status", status)),
                (("model_name", model_name), ("API", api), ("entrypoint", "REST")))
        self._increment(REQUEST_COUNT, labels[0])
        self._observe(REQUEST_LATENCY, labels[1], latency_us)

    def model_call(self, model_name: str, signature: str, rows: int) -> None:
        labels = (("model_name", model_name), ("signature", signature))
        self._increment(MODEL_CALLS, labels)
        self._observe(BATCH_SIZE, labels, rows)

    def predict_started(self, model_name: str, delta: int) -> None:
        """delta=+1 when a predict request is routed to a version, -1 when it is answered."""
        gauge = self._counters[PREDICTS_IN_FLIGHT]
        labels = (("model_name", model_name),)
        gauge[labels] = gauge.get(labels, 0) + delta

    def connection_refused(self, reason: str) -> None:
        self._increment(CONNECTIONS_CLOSED, (("reason", reason),))

    def _increment(self, name: str, labels: Labels) -> None:
        counters = self._counters[name]
        counters[labels] = counters.get(labels, 0) + 1

    def _observe(self, name: str, labels: Labels, value: float) -> None:
        histograms = self._histograms[name]
        if labels not in histograms:
            histograms[labels] = _Histogram(self._buckets[name])
        histograms[labels].observe(value)

    def exposition(self) -> str:
        lines = []
        for name, (kind, text) in self._help.items():
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            for labels, value in self._counters.get(name, {}).items():
                lines.append(f"{name}{_format_labels(labels)} {value}")
            for labels, histogram in self._histograms.get(name, {}).items():
                cumulative = 0
                for bound, count in zip((*histogram.buckets, "+Inf"), histogram.counts):
                    cumulative += count
                    lines.append(f"{name}_bucket{_format_labels(labels + (('le', str(bound)),))} {cumulative}")
                lines.append(f"{name}_sum{_format_labels(labels)} {float(histogram.sum)!r}")
                lines.append(f"{name}_count{_format_labels(labels)} {cumulative}")
        return "\n".join(lines) + "\n"


def _format_labels(labels: Labels) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{key}="{escape(value)}"' for key, value in labels) + "}"
