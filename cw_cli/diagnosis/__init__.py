"""Pure interpretation of what the cluster says: pod, Job and JobSet states and log tails in, reasons out.

Nothing here talks to a cluster; the callers in :mod:`cw_cli.k8s` read the objects and pass them in.
"""
