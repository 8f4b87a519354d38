package main

// The real nodes' registry (--registry): Debian's docker-registry on
// 127.0.0.1, plain HTTP, storage under the run's directory. The sshd image is
// pushed there with skopeo and every real node's containerd pulls it by
// digest, through a hosts.toml for that one host (containerd's config_path),
// as an operator's cluster pulls from its registry: nothing an operator would
// pull is imported.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// registryTools are what --registry needs from Debian (make real-node-deps).
var registryTools = []string{"/usr/bin/docker-registry", "/usr/bin/skopeo"}

// registry is the running docker-registry.
type registry struct {
	addr string
	proc *child
}

// registryAddr is the registry's host:port, or "" without --registry.
func (c *cluster) registryAddr() string {
	if c.real == nil || c.real.registry == nil {
		return ""
	}
	return c.real.registry.addr
}

// startRegistry starts docker-registry on a free port of 127.0.0.1 and waits
// until it answers /v2/.
func (r *realNodes) startRegistry(ctx context.Context, port int) error {
	for _, tool := range registryTools {
		if _, err := os.Stat(tool); err != nil {
			return fmt.Errorf("--registry: %s is missing (make real-node-deps installs Debian's docker-registry and skopeo): %w", tool, err)
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	dir := filepath.Join(r.dir, "registry")
	config := filepath.Join(dir, "config.yml")
	// The registry's own format (distribution's configuration, version 0.1).
	text := fmt.Sprintf("version: 0.1\nlog: {level: info}\nstorage: {filesystem: {rootdirectory: %q}, delete: {enabled: true}}\nhttp: {addr: %q}\n",
		filepath.Join(dir, "data"), addr)
	if err := writeFile(config, []byte(text), 0o644); err != nil {
		return err
	}
	ch, err := r.c.startProgram("registry", "/usr/bin/docker-registry", []string{"serve", config})
	if err != nil {
		return err
	}
	r.registry = &registry{addr: addr, proc: ch}
	if err := waitFor(ctx, ch, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /v2/: %s", resp.Status)
		}
		return nil
	}); err != nil {
		return r.c.failure(ch.name, ch.logPath, err, r.startTimeout)
	}
	return nil
}

// push copies an OCI archive into the registry as repository:tag and returns
// the reference by digest (127.0.0.1:PORT/repository@sha256:...).
func (r *realNodes) push(ctx context.Context, archive, repository, tag string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	name := r.registry.addr + "/" + repository
	out, err := exec.CommandContext(ctx, "/usr/bin/skopeo", "copy", "--quiet", "--dest-tls-verify=false",
		"oci-archive:"+archive, "docker://"+name+":"+tag).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("skopeo copy %s to %s:%s: %v: %s", archive, name, tag, err, strings.TrimSpace(string(out)))
	}
	digest, err := exec.CommandContext(ctx, "/usr/bin/skopeo", "inspect", "--tls-verify=false", "--format", "{{.Digest}}",
		"docker://"+name+":"+tag).Output()
	if err != nil {
		return "", fmt.Errorf("skopeo inspect %s:%s: %v", name, tag, err)
	}
	d := strings.TrimSpace(string(digest))
	if !strings.HasPrefix(d, "sha256:") {
		return "", errors.New("skopeo inspect " + name + ":" + tag + ": no digest: " + d)
	}
	return name + "@" + d, nil
}

// registryHosts is containerd's hosts.toml for the registry: plain HTTP, for
// that host only (every other registry keeps containerd's defaults).
func registryHosts(addr string) string {
	return fmt.Sprintf("server = %q\n\n[host.%q]\n  capabilities = [\"pull\", \"resolve\"]\n", "http://"+addr, "http://"+addr)
}
