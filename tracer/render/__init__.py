"""A trace (or a run's snapshots) as text, HTML, JSON and Perfetto."""
