"""Reading a REAL node_exporter's /metrics over the bridge with the Prometheus project's own
text-format parser (tests/integration/test_health_node_exporter.py, test_slurm.py)."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

# Debian's default --collector.textfile.directory (test_health_node_exporter.py reads it from the
# installed binary's --help)
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
PORT = 9100


def scrape(address: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name -> {sorted labels: value} of every sample node_exporter serves."""
    with urllib.request.urlopen(f"http://{address}:{PORT}/metrics", timeout=10) as response:
        text = response.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out
