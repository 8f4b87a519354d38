package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
)

// In-cluster clients find the API server through the `kubernetes` Service
// (KUBERNETES_SERVICE_HOST 10.96.0.1, port 443), which kube-proxy sends to
// the address the API server advertises. The API server listens on loopback
// only, which a pod cannot reach (its loopback is its own), so with real
// nodes it advertises the bridge's gateway and this forwarder carries
// connections from the gateway to loopback, byte for byte: TLS ends at the
// API server, which sees the pod's ServiceAccount token as usual.

// apiServerForward listens on the gateway at the API server's own port (the
// port the Endpoints of `kubernetes` name) and forwards to loopback.
func (r *realNodes) forwardAPIServer(server string) error {
	u, err := url.Parse(server)
	if err != nil {
		return err
	}
	target := u.Host
	ln, err := net.Listen("tcp", net.JoinHostPort(realGateway, u.Port()))
	if err != nil {
		return fmt.Errorf("listening on the gateway for in-cluster clients: %w", err)
	}
	r.apiForward = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					fmt.Fprintf(os.Stderr, "jumppod-controlplane: in-cluster API forwarder: %v\n", err)
				}
				return
			}
			go forward(conn, target)
		}
	}()
	return nil
}

// forward copies both ways until both sides are done, passing a half-close
// on (an HTTP/2 client may close its side first).
func forward(client net.Conn, target string) {
	defer client.Close()
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	defer server.Close()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tcp, ok := dst.(*net.TCPConn); ok {
			_ = tcp.CloseWrite()
		}
	}
	go pipe(server, client)
	go pipe(client, server)
	wg.Wait()
}
