"""reference/metrics.md: provision-health's metrics and files, from provision/remote/health/exporters.py."""

from __future__ import annotations

from refdocs.md import code, generated, prose, table


def page() -> str:
    from provision.remote.health import check, exporters

    # A textfile as the code writes it, for a host with one locked item drifted.
    out = check.Result(
        problems=["drift torch: locked 2.13.0, found none"],
        compared=[("driver", "595.58.03", "595.58.03", True), ("torch", "2.13.0", "none", False)],
        facts={"verify": {"verdict": "pass", "age_s": 86400}},
    )
    spec = {
        "lock_hash": "3f6c0a1e9b2d4c57",
        "group": "h100-x8-ubuntu-24.04",
        "verify": {
            "verdict": "pass",
            "gpu": "NVIDIA H100 80GB HBM3",
            "figures": {"gemm_tflops": 712.5, "copy_gbps": 2650.0},
        },
    }
    labels = ", ".join
    return "".join(
        [
            "# Metrics and files\n\n",
            generated("`provision/remote/health/exporters.py` (`METRICS`, `NFD_LABELS`)"),
            "What `provision-health` writes besides its line and `--json` "
            "([Prometheus](../how-to/prometheus.md), [Kubernetes](../how-to/kubernetes.md)).\n\n",
            "## Files\n\n",
            table(
                ("Option", "File", "Read by"),
                [
                    (
                        "`--textfile DIR`",
                        f"`DIR/{exporters.TEXTFILE}`",
                        "node_exporter's textfile collector (`--collector.textfile.directory`)",
                    ),
                    (
                        "`--nfd-features DIR`",
                        f"`DIR/{exporters.FEATURES}`",
                        "Node Feature Discovery's local source (`features.d/`)",
                    ),
                ],
            ),
            "\nEach is written to a dot-named temporary file in `DIR` and renamed into place, mode `0644`; a `DIR` "
            "that does not exist is one line and exit 2 before anything is checked or written.\n\n",
            "## Metrics (`provision.prom`)\n\n",
            table(
                ("Metric", "Type", "Labels", "What"),
                [
                    (f"`{m.name}`", m.kind, labels(f"`{x}`" for x in m.labels) or "-", prose(m.help))
                    for m in exporters.METRICS
                ],
            ),
            "\nNo sample carries a timestamp (node_exporter rejects them in textfiles). A family with nothing "
            "to say is left out: no `provision_verify_age_seconds` for a host never verified, no figures where "
            "the spec has none.\n\n"
            "For a host whose venv lost torch, the file reads:\n\n",
            code(exporters.prometheus_text(spec, out), "text"),
            "\n## Node labels (`features.d/provision`)\n\n",
            table(
                ("Label", "Value"),
                [(f"`{exporters.NFD_PREFIX}{k}`", prose(v)) for k, v in exporters.NFD_LABELS.items()],
            ),
            f"\nThe file starts with `# +expiry-time=` ({exporters.NFD_EXPIRY_S // 60} minutes after the run, RFC 3339 "
            "UTC); values are made valid Kubernetes label values (at most 63 of `[-A-Za-z0-9_.]`, alphanumeric at "
            "both ends), and a label with no value is left out.\n",
        ]
    )
