"""Trainer metrics: parse the records a run logs, build series, plot them (``cw metrics``).

Nothing here prints; the CLI layer (:mod:`cw_cli.cli.metrics`) decides what to show. Kubernetes,
matplotlib and plotext are imported only inside the functions that need them.
"""
