// CoreDNS with the plugins the local cluster's Corefile uses (localcluster/node.py) and the few a
// cluster's DNS commonly adds, not the ~60 of upstream's main package: those pull in the AWS, Azure,
// Google Cloud and Datadog SDKs (about 400 packages), which made CoreDNS the third-longest Go build.
package main

import (
	"github.com/coredns/coredns/coremain"

	// The order does not matter: a Corefile's plugins run in the order of dnsserver.Directives.
	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() {
	coremain.Run()
}
