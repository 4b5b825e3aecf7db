"""Files provision writes for the engines fleets already run (Slurm, Prometheus, Kubernetes)."""
