"""Where `--otlp URL` pushes metrics, and whether it can: checked before anything is attached,
without importing the OpenTelemetry SDK (an optional extra, `pip install 'iotrace[otlp]'`).
"""

from __future__ import annotations

import importlib.util
from urllib.parse import urlsplit, urlunsplit

# OTLP/HTTP's path for metrics (the OpenTelemetry protocol specification): a URL without a
# path gets it, as OTEL_EXPORTER_OTLP_ENDPOINT does; one with a path is used as it is.
METRICS_PATH = "/v1/metrics"
EXAMPLE = "e.g. http://127.0.0.1:4318 (an OpenTelemetry collector's OTLP/HTTP receiver)"
NEEDS = ("--otlp needs the OpenTelemetry SDK and its OTLP/HTTP exporter: pip install "
         "'iotrace[otlp]'")
_PACKAGES = ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.http.metric_exporter")


def parse_otlp_url(text: str) -> str:
    """`--otlp URL` -> the URL metrics are posted to. Raises ValueError with one line naming
    what is wrong and what to write instead."""
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"--otlp {text!r}: give the receiver's URL, {EXAMPLE}")
    url = urlsplit(text)
    if url.scheme not in ("http", "https"):
        raise ValueError(f"--otlp {text!r}: give an http:// or https:// URL, {EXAMPLE}")
    if not url.hostname:
        raise ValueError(f"--otlp {text!r}: the URL names no host, {EXAMPLE}")
    try:
        port = url.port
    except ValueError:
        port = 0
    if port == 0 or (port is None and url.netloc.endswith(":")):
        raise ValueError(f"--otlp {text!r}: the port must be a number from 1 to 65535, {EXAMPLE}")
    path = url.path if url.path not in ("", "/") else METRICS_PATH
    return urlunsplit((url.scheme, url.netloc, path, url.query, ""))


def missing_packages() -> str | None:
    """What to install when the OpenTelemetry SDK or its exporter is missing (`NEEDS`), else
    None."""
    for name in _PACKAGES:
        try:
            if importlib.util.find_spec(name) is None:
                return NEEDS
        except ModuleNotFoundError:  # a parent package is missing
            return NEEDS
    return None
