"""The test cluster's real node: a kubelet, containerd and runc whose pods really run, in network
namespaces the cluster makes itself, with an image built here (see docs/test-cluster.md).

:mod:`.network` (namespaces, links, routes), :mod:`.settings` (the components' configurations),
:mod:`.image` (the runtime and pause images), :mod:`.node` (start), :mod:`.cleanup` (stop, and
what is left).
"""
