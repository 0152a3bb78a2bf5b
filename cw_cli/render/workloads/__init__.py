"""The workload kinds, rendering half: a trainer Job, one JobSet, servers only. The contract each
kind answers is :mod:`cw_cli.render.workloads.base`; the choice among them is
:mod:`cw_cli.render.workload`; the cluster half is :mod:`cw_cli.k8s.workloads`."""
