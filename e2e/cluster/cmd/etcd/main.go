// etcd for the local control plane: etcd's own server (go.etcd.io/etcd/server/v3,
// the version Kubernetes v1.35 requires) started through its embed package,
// listening on one loopback client URL.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "etcd data directory (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL to listen on")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL to listen on")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: --data-dir is required")
	}
	cu, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("etcd: --listen-client-url: %v", err)
	}
	pu, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("etcd: --listen-peer-url: %v", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "tritonscale"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	cfg.LogLevel = "warn"
	// A throwaway single-member cluster for tests: no fsync per write.
	cfg.UnsafeNoFsync = true

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: %v", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready on %s", cu)
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-sig:
	case err := <-e.Err():
		log.Printf("etcd: %v", err)
	}
	e.Close()
}
