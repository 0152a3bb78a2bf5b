//go:build tools

// Package tools pins the JobSet controller (the module's root main package) built by this module.
package tools

import _ "sigs.k8s.io/jobset"
