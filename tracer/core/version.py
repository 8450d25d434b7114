"""iotrace's version, in the lowest layer: meta.json's tool_version, /metrics' build info and
`iotrace --version` read it from here, so that no stage imports the package root for it."""

__version__ = "0.1.0"
