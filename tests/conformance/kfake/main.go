// Command kfake starts franz-go's fake Kafka cluster (one broker) on a free loopback port,
// prints its address (HOST:PORT) and serves until SIGINT or SIGTERM: the target of
// `kproto conformance` for the kfake figures in docs/conformance.md. Build it outside the
// repository (go build -o DIR/kfake .); it is not part of CI.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer c.Close()
	fmt.Println(c.ListenAddrs()[0])
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	<-sig
}
