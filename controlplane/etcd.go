package main

import (
	"fmt"
	"math/rand/v2"
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

// freePorts finds n distinct free loopback ports below the kernel's ephemeral
// range (net.ipv4.ip_local_port_range) and below the NodePort range. A port the
// kernel hands out for ":0" is an ephemeral one, and every outgoing connection
// draws from the same range: with the kubelets and kube-proxy bound seconds
// after the ports were found, a test's client connection took kube-proxy's
// healthz port once and the real nodes never came up. Below that range only a
// process that binds on purpose can take a port in between, and then the
// component fails to bind and `up` names it.
func freePorts(n int) ([]int, error) {
	low, high := portWindow()
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 100*n {
			return nil, fmt.Errorf("finding %d free ports in %d-%d: only %d after %d tries", n, low, high-1, len(ports), tries)
		}
		port := low + rand.IntN(high-low)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		listeners = append(listeners, l)
		ports = append(ports, port)
	}
	return ports, nil
}

// portWindow is [low, high): from 10000 up to the first of the ephemeral range
// and the NodePort range (30000-32767, the apiserver's default), which
// kube-proxy owns.
func portWindow() (int, int) {
	low, high := 10000, 30000
	if data, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var first, last int
		if _, err := fmt.Sscan(string(data), &first, &last); err == nil && first > low+1000 && first < high {
			high = first
		}
	}
	return low, high
}
