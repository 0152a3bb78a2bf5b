// The sandbox ("pause") program of the test cluster's real node: containerd's CRI starts it as
// every pod's first container, from an image built here (no registry is reachable).
module cw.local/tools/pause

go 1.26.0
