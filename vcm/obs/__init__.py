"""Observability: Prometheus metrics, the audit trail and its content-free footprints."""
