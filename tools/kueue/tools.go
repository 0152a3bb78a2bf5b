//go:build tools

// Package tools pins the kueue command built by this module.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
