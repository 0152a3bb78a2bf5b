// Command coredns is the test cluster's cluster DNS: CoreDNS's own main with only the plugins the
// real node's Corefile uses (cw_cli/testcluster/realnode/dns.py). There is no forward plugin, so a
// name outside the cluster's zones is answered REFUSED at once instead of going off the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the plugins above, in the order of CoreDNS's core/dnsserver/zdirectives.go (the
// order a query runs through them). A Corefile naming any other plugin fails to load.
var directives = []string{
	"bind",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
}

func init() {
	dnsserver.Directives = directives
}

func main() {
	coremain.Run()
}
