"""The test cluster's one name: its kubeconfig context, cluster and user, its certificates' CA and
admin, its etcd member and the volumes `cw cluster up` makes. ("local" is this machine without a
cluster: `--local` runs and their ./cw-local folders.)"""

NAME = "cw-test"
#: The name before the test cluster was called cw-test: `cw cluster down` still removes its
#: kubeconfig entries and state folder.
LEGACY_NAME = "cw-local"
