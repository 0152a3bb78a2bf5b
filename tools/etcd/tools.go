//go:build tools

// Package tools pins the etcd server command built by this module.
package tools

import _ "go.etcd.io/etcd/server/v3"
