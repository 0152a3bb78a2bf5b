"""The cluster client: kubeconfig loading, the HTTP transport, the dict-in dict-out `Kube`, streams.

Everything cw sends to a cluster goes through here, with one identity; nothing here knows of runs.

- ``kubeconfig``: :func:`~cw_cli.client.kubeconfig.load`, kubectl's merge of the files into the
  :class:`~cw_cli.client.credentials.Credentials` of one context, from ``kubeconfig_entries`` (a
  cluster and a user), ``kubeconfig_values`` (the checks of every value), ``exec_plugin`` and
  ``in_cluster`` (a pod's service account).
- ``transport``: HTTP(S) with a keep-alive pool, through ``tls`` and ``proxy`` (kubectl's rules).
- ``connection``: ``connect()`` and ``Kube``, with ``resources`` (the kinds), ``api_errors`` (statuses
  as cw's errors) and ``official`` (the ``kubernetes`` package's loader, for what cw does not read).
- ``channels``: exec and port-forward streams.
"""
