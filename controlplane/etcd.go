package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// startEtcd runs a single-member etcd inside this process, on loopback, with
// its data under dir/etcd (wiped first: every run starts from an empty cluster).
func startEtcd(dir string, timeout time.Duration) (*embed.Etcd, string, error) {
	dataDir := filepath.Join(dir, "etcd")
	if err := os.RemoveAll(dataDir); err != nil {
		return nil, "", err
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[0])}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[1])}

	cfg := embed.NewConfig()
	cfg.Name = "jumppod"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// A throwaway test store: durability buys nothing and fsync costs seconds.
	cfg.UnsafeNoFsync = true
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "logs", "etcd.log")}
	// Keep memory flat over a long test run.
	cfg.SnapshotCount = 5000
	cfg.AutoCompactionMode = "revision"
	cfg.AutoCompactionRetention = "1000"
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, "", err
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("starting embedded etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd failed: %w", err)
	case <-time.After(timeout):
		e.Server.Stop()
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd not ready within %s", timeout)
	}
}

// freePorts asks the kernel for n distinct free loopback ports. The listeners
// are closed before the ports are used, so another process could take one in
// between; the component then fails to bind and `up` names it.
func freePorts(n int) ([]int, error) {
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
