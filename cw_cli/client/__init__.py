"""The cluster client: kubeconfig loading, the HTTP transport, the dict-in dict-out `Kube`, streams.

Everything cw sends to a cluster goes through here, with one identity; nothing here knows of runs.
"""
