package main

// Real nodes: `up --real-nodes N` starts, beside the fake nodes, N nodes run
// by the upstream kubelet (this binary's `kubelet` subcommand), each with a
// containerd of its own (Debian's containerd and runc) and CNI from Debian's
// containernetworking-plugins on a bridge this file creates, and one
// kube-proxy (iptables mode) for all of them: they share this machine's
// network namespace, so a second kube-proxy would write the same chains.
//
// Network rule of the workplace: pods get addresses on the harness's own
// bridge and a route to the service range only, nothing is masqueraded to
// the outside, a FORWARD rule drops whatever would leave the bridge from the
// pod range, and NodePorts answer on 127.0.0.1 and on the nodes' own
// addresses on that bridge only (a client reaching the pod through another
// node than its own, as one outside a cluster does).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	// RealNodeLabel and RealNodeTaint keep every pod that does not ask for a
	// real node off them: the fast suite's pods have neither the toleration
	// nor the selector.
	realNodeLabel = "jumppod.test/real-node"
	realNodeTaint = "jumppod.test/real-node"
	// PressureTaint keeps every pod but a memory-pressure test's off the node
	// whose kubelet evicts at a threshold near the machine's free memory.
	pressureTaint = "jumppod.test/memory-pressure"

	// The images `images/build.sh` makes, imported into every node's containerd.
	pauseImage = "localhost/jumppod/pause:1"
	sshdImage  = "localhost/jumppod/sshd:bookworm"

	// One bridge per machine (the lock below makes sure of it), its range,
	// and the service range of the apiserver, the only other route pods get.
	realBridge    = "jumppod0"
	realSubnet    = "10.222.0.0/16"
	realGateway   = "10.222.0.1"
	serviceRange  = "10.96.0.0/16"
	realNodesLock = "/run/jumppod-controlplane-real-nodes.lock"
	// stateBase holds what has unix sockets in it (containerd's, the
	// kubelet's root dir): a socket's path is limited to 104 bytes, which a
	// run directory under /tmp or target/ overruns. One run per machine at a
	// time, so one directory serves; configs and logs stay in DIR.
	stateBase       = "/var/lib/jumppod-real-nodes"
	iptablesComment = "jumppod-controlplane real nodes: nothing leaves the bridge"
)

// realNodeIP is node i's address (1-based) on the bridge: the kubelet
// refuses a loopback node IP.
func realNodeIP(i int) string { return fmt.Sprintf("10.222.0.%d", 10+i) }

// realNodeName is node i's name.
func realNodeName(i int) string { return fmt.Sprintf("real-node-%d", i) }

// kernelTunables are what the kubelet (setupKernelTunables) and kube-proxy
// (route_localnet) write in /proc/sys; they are put back on stop.
var kernelTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/conf/all/route_localnet",
}

// RealNodesInfo goes into ready.json under "real_nodes".
type realNodesInfo struct {
	Nodes       []realNodeInfo `json:"nodes"`
	SSHDImage   string         `json:"sshd_image"`
	PauseImage  string         `json:"pause_image"`
	Label       string         `json:"label"`
	Taint       string         `json:"taint"`
	Bridge      string         `json:"bridge"`
	PodSubnet   string         `json:"pod_subnet"`
	NodePortsOn string         `json:"nodeports_on"`
	Pressure    *pressureInfo  `json:"pressure,omitempty"`
	// Registry: --registry's host:port; the sshd image is then pulled from it.
	Registry string `json:"registry,omitempty"`
}

// pressureInfo is the node of --pressure-headroom: its soft memory threshold and
// what it was computed from, in bytes.
type pressureInfo struct {
	Node             string `json:"node"`
	Taint            string `json:"taint"`
	AvailableAtStart int64  `json:"available_at_start"`
	Headroom         int64  `json:"headroom"`
	Threshold        int64  `json:"threshold"`
}

type realNodeInfo struct {
	Name             string `json:"name"`
	IP               string `json:"ip"`
	ContainerdSocket string `json:"containerd_socket"`
	KubeletLog       string `json:"kubelet_log"`
	ContainerdLog    string `json:"containerd_log"`
}

type realNode struct {
	index      int
	name, ip   string
	dir        string // configs and pod logs, in DIR/nodes
	state      string // containerd's and the kubelet's state, under stateBase
	socket     string
	containerd *child
	kubelet    *child
	cgroups    []string
	// What its kubelet is started with, again after a power cut.
	kubeconfig        string
	port, healthzPort int
	pressure          *pressureInfo
	// off: its power is cut (power.go).
	off bool
	// paused: its kubelet is stopped by SIGSTOP (power.go), since pausedAt.
	paused   bool
	pausedAt time.Time
	// containerdStopped: its containerd is stopped, its shims and pods run
	// on (power.go), since containerdStoppedAt.
	containerdStopped   bool
	containerdStoppedAt time.Time
}

// realNodes is everything `up --real-nodes` started or changed, so that
// stop can undo it.
type realNodes struct {
	// mu: a power cut or boot (power.go) and stop do not overlap.
	mu        sync.Mutex
	c         *cluster
	dir       string
	lock      *os.File
	nodes     []*realNode
	proxy     *child
	bridge    bool
	iptables  [][]string
	tunables  map[string]string
	imagesDir string
	// startTimeout is up's --start-timeout, for failure messages.
	startTimeout time.Duration
	// headroom is up's --pressure-headroom; pressure what it set up.
	headroom int64
	// sync is up's --kubelet-sync-frequency.
	sync     time.Duration
	pressure *pressureInfo
	// apiForward carries pods' connections to the API server (incluster.go).
	apiForward net.Listener
	// registry: up's --registry (registry.go); sshdRef the sshd image pushed
	// there, by digest.
	registry *registry
	sshdRef  string
}

// realNodeTools are what the real nodes need from Debian (make real-node-deps).
var realNodeTools = []string{
	"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/bin/ctr", "/usr/sbin/runc",
	"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/usr/lib/cni/portmap",
	"/usr/sbin/iptables", "/usr/sbin/conntrack", "/usr/sbin/ip",
}

// startRealNodes brings up opts.realNodes real nodes and kube-proxy. users holds the
// kubeconfigs startCluster wrote (the nodes' and kube-proxy's included).
func (c *cluster) startRealNodes(ctx context.Context, start time.Time, opts upOptions, users map[string]string, admin kubernetes.Interface) error {
	r := &realNodes{c: c, dir: filepath.Join(c.dir, "nodes"), tunables: map[string]string{},
		imagesDir: opts.realNodeImages, startTimeout: opts.startTimeout, headroom: opts.pressureHeadroom, sync: opts.kubeletSync}
	c.real = r
	// Node N's addresses are 10.222.0.1N and 10.222.N.0/24.
	if opts.realNodes > 9 {
		return fmt.Errorf("--real-nodes %d: at most 9", opts.realNodes)
	}
	for _, tool := range realNodeTools {
		if _, err := os.Stat(tool); err != nil {
			return fmt.Errorf("real nodes: %s is missing (make real-node-deps installs Debian's containerd, runc, containernetworking-plugins, iptables, conntrack): %w", tool, err)
		}
	}
	images := append([]string{filepath.Join(r.imagesDir, "pause.oci.tar"), filepath.Join(r.imagesDir, "sshd.oci.tar")}, opts.extraImages...)
	for _, image := range images {
		if _, err := os.Stat(image); err != nil {
			return fmt.Errorf("real nodes: image archive missing (make real-node-images builds it): %w", err)
		}
	}
	lock, err := os.OpenFile(realNodesLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(realNodesLock)
		lock.Close()
		return fmt.Errorf("real nodes: another `up --real-nodes` runs on this machine (%s holds %s: %s); they would share one bridge and one set of kube-proxy chains",
			strings.TrimSpace(string(holder)), realNodesLock, err)
	}
	r.lock = lock
	_ = lock.Truncate(0)
	_, _ = fmt.Fprintf(lock, "pid %d, dir %s\n", os.Getpid(), c.dir)

	// What a run killed with SIGKILL left behind: its shims, mounts, bridge
	// and rules. Nobody else can be using them: we hold the lock.
	r.removeLeftovers()
	for _, d := range []string{r.dir, stateBase} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("real nodes: removing the previous run's %s: %w", d, err)
		}
	}
	if err := os.MkdirAll(stateBase, 0o755); err != nil {
		return err
	}
	for _, t := range kernelTunables {
		if v, err := os.ReadFile(filepath.Join("/proc/sys", t)); err == nil {
			r.tunables[t] = strings.TrimSpace(string(v))
		}
	}
	if err := r.setUpNetwork(opts.realNodes); err != nil {
		return fmt.Errorf("real nodes: network: %w", err)
	}
	progress(start, "bridge %s (%s) ready", realBridge, realSubnet)
	if err := r.forwardAPIServer(c.server); err != nil {
		return fmt.Errorf("real nodes: %w", err)
	}

	ports, err := freePorts(2*opts.realNodes + 3)
	if err != nil {
		return err
	}
	if opts.registry {
		if err := r.startRegistry(ctx, ports[len(ports)-1]); err != nil {
			return err
		}
		sshd := filepath.Join(r.imagesDir, "sshd.oci.tar")
		ref, err := r.push(ctx, sshd, "jumppod/sshd", "bookworm")
		if err != nil {
			return fmt.Errorf("real nodes: %w", err)
		}
		r.sshdRef = ref
		// Pulled, not imported.
		images = slices.DeleteFunc(images, func(i string) bool { return i == sshd })
		progress(start, "registry on %s, the sshd image pushed: %s", r.registry.addr, ref)
	}
	for i := 1; i <= opts.realNodes; i++ {
		node := &realNode{index: i, name: realNodeName(i), ip: realNodeIP(i),
			dir: filepath.Join(r.dir, realNodeName(i)), state: filepath.Join(stateBase, realNodeName(i))}
		node.socket = filepath.Join(node.state, "containerd.sock")
		r.nodes = append(r.nodes, node)
		if err := r.startContainerd(ctx, node); err != nil {
			return err
		}
	}
	// Imports in turn: two at once only share the same two cores.
	for _, node := range r.nodes {
		for _, image := range images {
			if err := r.importImage(ctx, node, image); err != nil {
				return err
			}
		}
		progress(start, "%s: containerd ready, images imported", node.name)
	}
	// One kubelet at a time: every kubelet on a machine serves its device-plugin
	// registration at the same fixed path (/var/lib/kubelet/device-plugins/
	// kubelet.sock, not under --root-dir), and each empties that directory
	// before it binds. Two starting together can both empty it and then both
	// bind, and the loser exits ("Failed to start ContainerManager ... address
	// already in use"), which failed a CI run. Started in turn, the later
	// kubelet replaces the earlier one's socket; none of them has a device
	// plugin, so nothing is lost.
	for _, node := range r.nodes {
		before := socketAt(devicePluginSocket)
		var pressure *pressureInfo
		if r.headroom > 0 && node == r.nodes[len(r.nodes)-1] {
			// Measured last, just before this kubelet starts: the other nodes'
			// containerds and kubelets are already counted in.
			available, err := memoryAvailable()
			if err != nil {
				return fmt.Errorf("real nodes: --pressure-headroom: reading the machine's available memory: %w", err)
			}
			if available <= r.headroom {
				return fmt.Errorf("real nodes: --pressure-headroom %d bytes: only %d bytes are available", r.headroom, available)
			}
			pressure = &pressureInfo{Node: node.name, Taint: pressureTaint + "=true:NoSchedule",
				AvailableAtStart: available, Headroom: r.headroom, Threshold: available - r.headroom}
			r.pressure = pressure
			progress(start, "%s: evicts for memory below %d MiB available (%d MiB now)", node.name, pressure.Threshold>>20, available>>20)
		}
		node.kubeconfig, node.pressure = users[realNodeUser(node.name)], pressure
		node.port, node.healthzPort = ports[2*node.index-2], ports[2*node.index-1]
		if err := r.startKubelet(node); err != nil {
			return err
		}
		if err := waitFor(ctx, node.kubelet, func(context.Context) error { return socketReplaced(devicePluginSocket, before) }); err != nil {
			return c.failure(node.kubelet.name+" (node "+node.name+")", node.kubelet.logPath, err, opts.startTimeout)
		}
	}
	for _, node := range r.nodes {
		if err := waitFor(ctx, node.kubelet, func(ctx context.Context) error { return realNodeReady(ctx, admin, node.name) }); err != nil {
			return c.failure(node.kubelet.name+" (node "+node.name+")", node.kubelet.logPath, err, opts.startTimeout)
		}
		progress(start, "%s Ready (containerd)", node.name)
	}
	healthzPort, metricsPort := ports[len(ports)-2], ports[len(ports)-1]
	if err := r.startProxy(users[kubeProxyUser], healthzPort, metricsPort); err != nil {
		return err
	}
	health := &http.Client{Timeout: 5 * time.Second}
	if err := waitFor(ctx, r.proxy, func(ctx context.Context) error {
		return getOK(ctx, health, fmt.Sprintf("http://127.0.0.1:%d/healthz", healthzPort))
	}); err != nil {
		return c.failure(r.proxy.name, r.proxy.logPath, err, opts.startTimeout)
	}
	progress(start, "kube-proxy healthy (iptables, NodePorts on 127.0.0.1)")
	go r.keepPower(admin, start)
	return nil
}

// devicePluginSocket is where every kubelet binds its device-plugin
// registration server, whatever its --root-dir.
const devicePluginSocket = "/var/lib/kubelet/device-plugins/kubelet.sock"

// socketIdentity names the socket at path by inode and change time (an
// inode number alone can be reused at once by the next file); zero when
// there is none.
type socketIdentity struct {
	ino  uint64
	ctim syscall.Timespec
}

func socketAt(path string) socketIdentity {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return socketIdentity{}
	}
	return socketIdentity{ino: st.Ino, ctim: st.Ctim}
}

// socketReplaced: a socket other than `before` is at path, and something
// accepts connections on it.
func socketReplaced(path string, before socketIdentity) error {
	now := socketAt(path)
	if now == (socketIdentity{}) || now == before {
		return fmt.Errorf("no new device-plugin socket at %s yet", path)
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return fmt.Errorf("device-plugin socket %s: %w", path, err)
	}
	return conn.Close()
}

// info is what ready.json says about the real nodes.
func (r *realNodes) info() *realNodesInfo {
	sshd := sshdImage
	if r.sshdRef != "" {
		sshd = r.sshdRef
	}
	in := &realNodesInfo{
		SSHDImage: sshd, PauseImage: pauseImage,
		Label: realNodeLabel + "=true", Taint: realNodeTaint + "=true:NoSchedule",
		Bridge: realBridge, PodSubnet: realSubnet, NodePortsOn: strings.Join(r.nodePortAddresses(), ","),
		Pressure: r.pressure,
	}
	if r.registry != nil {
		in.Registry = r.registry.addr
	}
	for _, n := range r.nodes {
		in.Nodes = append(in.Nodes, realNodeInfo{
			Name: n.name, IP: n.ip, ContainerdSocket: n.socket,
			KubeletLog: n.kubelet.logPath, ContainerdLog: n.containerd.logPath,
		})
	}
	return in
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// setUpNetwork creates the bridge with the gateway and the nodes' addresses
// on it, and the FORWARD rule that keeps pod traffic on the bridge.
func (r *realNodes) setUpNetwork(n int) error {
	if err := run("ip", "link", "add", realBridge, "type", "bridge"); err != nil {
		return err
	}
	r.bridge = true
	if err := run("ip", "addr", "add", realGateway+"/16", "dev", realBridge); err != nil {
		return err
	}
	for i := 1; i <= n; i++ {
		if err := run("ip", "addr", "add", realNodeIP(i)+"/32", "dev", realBridge); err != nil {
			return err
		}
	}
	if err := run("ip", "link", "set", realBridge, "up"); err != nil {
		return err
	}
	for _, rule := range [][]string{
		{"FORWARD", "-s", realSubnet, "!", "-o", realBridge, "-m", "comment", "--comment", iptablesComment, "-j", "DROP"},
		{"FORWARD", "-d", realSubnet, "!", "-i", realBridge, "-m", "comment", "--comment", iptablesComment, "-j", "DROP"},
	} {
		if err := run("iptables", append([]string{"-w", "-I"}, rule...)...); err != nil {
			return err
		}
		r.iptables = append(r.iptables, rule)
	}
	return nil
}

// v1Controllers are the cgroup v1 hierarchies mounted under /sys/fs/cgroup.
func v1Controllers() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != "unified" {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// cgroupRoot is node's own cgroup root: two kubelets under the same
// /kubepods would each remove the other's pod cgroups as orphans.
func cgroupRoot(node string) string { return "/jumppod-" + node }

func (r *realNodes) makeCgroups(node *realNode) error {
	node.cgroups = nil
	for _, hierarchy := range v1Controllers() {
		path := filepath.Join(hierarchy, cgroupRoot(node.name))
		if err := os.MkdirAll(path, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", path, err)
		}
		node.cgroups = append(node.cgroups, path)
		// A new cpuset cgroup has no cpus and no memory nodes: nothing could
		// run in it until they are copied from the parent.
		if filepath.Base(hierarchy) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(hierarchy, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(path, f), v, 0o644); err != nil {
					return fmt.Errorf("%s/%s: %w", path, f, err)
				}
			}
		}
	}
	return nil
}

// containerdConfig is a node's containerd configuration; hosts, when not "",
// is the directory of its registries' hosts.toml files (--registry).
func containerdConfig(node *realNode, hosts string) string {
	d := filepath.Join(node.state, "containerd")
	registries := ""
	if hosts != "" {
		registries = fmt.Sprintf("  [plugins.\"io.containerd.grpc.v1.cri\".registry]\n    config_path = %q\n", hosts)
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q
oom_score = 0
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = %q

[plugins."io.containerd.internal.v1.opt"]
  path = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This container lacks CAP_SYS_RESOURCE: without it runc fails every sandbox.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
%s`, filepath.Join(d, "root"), filepath.Join(d, "state"), node.socket, filepath.Join(d, "opt"), pauseImage,
		filepath.Join(d, "runc"), filepath.Join(node.dir, "cni", "net.d"), registries)
}

// cniConfig: one bridge for every node, each node allocating from its own
// part of the range; routes to the bridge's subnet and the services only.
func cniConfig(node *realNode) string {
	return fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "jumppod",
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "rangeStart": "10.222.%d.2", "rangeEnd": "10.222.%d.254", "gateway": %q}]],
        "routes": [{"dst": %q}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, realBridge, filepath.Join(node.state, "cni-ipam"), realSubnet, node.index, node.index, realGateway, serviceRange)
}

func (r *realNodes) startContainerd(ctx context.Context, node *realNode) error {
	if err := r.makeCgroups(node); err != nil {
		return err
	}
	hosts := ""
	if r.registry != nil {
		hosts = filepath.Join(node.dir, "certs.d")
		file := filepath.Join(hosts, r.registry.addr, "hosts.toml")
		if err := writeFile(file, []byte(registryHosts(r.registry.addr)), 0o644); err != nil {
			return err
		}
	}
	config := filepath.Join(node.dir, "containerd.toml")
	if err := writeFile(config, []byte(containerdConfig(node, hosts)), 0o644); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(node.dir, "cni", "net.d", "10-jumppod.conflist"), []byte(cniConfig(node)), 0o644); err != nil {
		return err
	}
	ch, err := r.c.startProgram("containerd-"+node.name, "/usr/bin/containerd", []string{"--config", config, "--log-level", "info"})
	if err != nil {
		return err
	}
	node.containerd = ch
	if err := waitFor(ctx, ch, func(ctx context.Context) error {
		// Dialing before the socket exists only makes gRPC log its retries.
		if _, err := os.Stat(node.socket); err != nil {
			return err
		}
		conn, err := criConn(node.socket)
		if err != nil {
			return err
		}
		defer conn.Close()
		_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
		return err
	}); err != nil {
		return r.c.failure(ch.name, ch.logPath, err, r.startTimeout)
	}
	return nil
}

func criConn(socket string) (*grpc.ClientConn, error) {
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func (r *realNodes) importImage(ctx context.Context, node *realNode, archive string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "/usr/bin/ctr", "--address", node.socket, "--namespace", "k8s.io",
		"images", "import", archive).CombinedOutput()
	if err != nil {
		return errors.New(describeFailure("containerd-"+node.name+" (ctr images import "+archive+")", node.containerd.logPath,
			fmt.Sprintf("%v: %s", err, strings.TrimSpace(string(out)))))
	}
	return nil
}

func kubeletConfig(node *realNode, port, healthzPort int, sync time.Duration, pressure *pressureInfo) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 here (KEP-5573: refused unless said), no systemd, no swap.
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %q
failSwapOn: false
# The disk is the machine's, shared with the build (a clean build takes about 20 GB): at the
# default thresholds (nodefs.available<10%%, imagefs.available<15%%) a full disk would taint
# the nodes with disk-pressure and evict their pods, which failed the real-node test twice in
# full runs. Memory keeps its default; a test of memory pressure sets its own.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 5%%
  imagefs.inodesFree: 5%%
# For the same reason, no image garbage collection (100 turns it off): at its default 85%% of
# the disk used it deleted the imported pause image, and every new pod failed to start.
imageGCHighThresholdPercent: 100
# How often each pod is synced, and with it a changed Secret written into its volume.
syncFrequency: %s
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
podLogsDir: %q
# No host resolv.conf for pods: they have no route to a name server anyway.
resolvConf: ""
clusterDomain: cluster.local
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
authorization:
  mode: Webhook
registerWithTaints:
  - key: %s
    value: "true"
    effect: NoSchedule
`, cgroupRoot(node.name), sync, node.socket, node.ip, port, healthzPort, filepath.Join(node.dir, "pod-logs"), realNodeTaint) +
		pressureConfig(pressure)
}

// pressureConfig is what the pressure node's configuration adds: its own taint
// and a soft threshold on memory.available. Soft, because a hard threshold is
// subtracted from the node's allocatable memory (one near the machine's free
// memory leaves none for the pods), and a soft one is not. The grace and the
// pods' longest stop are short so that a test sees each eviction in seconds.
func pressureConfig(p *pressureInfo) string {
	if p == nil {
		return ""
	}
	return fmt.Sprintf(`  - key: %s
    value: "true"
    effect: NoSchedule
evictionSoft:
  memory.available: "%d"
evictionSoftGracePeriod:
  memory.available: 5s
evictionMaxPodGracePeriod: 5
`, pressureTaint, p.Threshold)
}

// memoryAvailable is the machine's memory.available as the kubelet computes
// it on cgroup v1 (eviction helpers.go makeSignalObservations, from cAdvisor):
// the capacity (MemTotal) less the root memory cgroup's working set, its usage
// less its inactive file pages.
func memoryAvailable() (int64, error) {
	meminfo, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, line := range strings.Split(string(meminfo), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kib, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/meminfo MemTotal %q: %w", f[1], err)
			}
			total = kib * 1024
		}
	}
	usageText, err := os.ReadFile("/sys/fs/cgroup/memory/memory.usage_in_bytes")
	if err != nil {
		return 0, err
	}
	usage, err := strconv.ParseInt(strings.TrimSpace(string(usageText)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("memory.usage_in_bytes %q: %w", usageText, err)
	}
	stat, err := os.ReadFile("/sys/fs/cgroup/memory/memory.stat")
	if err != nil {
		return 0, err
	}
	var inactiveFile int64
	for _, line := range strings.Split(string(stat), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "total_inactive_file" {
			if inactiveFile, err = strconv.ParseInt(f[1], 10, 64); err != nil {
				return 0, fmt.Errorf("memory.stat total_inactive_file %q: %w", f[1], err)
			}
		}
	}
	if total == 0 {
		return 0, errors.New("/proc/meminfo has no MemTotal")
	}
	workingSet := usage - inactiveFile
	if workingSet < 0 {
		workingSet = 0
	}
	return total - workingSet, nil
}

func (r *realNodes) startKubelet(node *realNode) error {
	config := filepath.Join(node.dir, "kubelet.yaml")
	if err := writeFile(config, []byte(kubeletConfig(node, node.port, node.healthzPort, r.sync, node.pressure)), 0o644); err != nil {
		return err
	}
	ch, err := r.c.startSubcommand("kubelet-"+node.name, "kubelet", []string{
		"--config=" + config,
		"--kubeconfig=" + node.kubeconfig,
		"--root-dir=" + filepath.Join(node.state, "kubelet"),
		"--volume-plugin-dir=" + filepath.Join(node.state, "volume-plugins"),
		"--hostname-override=" + node.name,
		"--node-ip=" + node.ip,
		"--node-labels=" + realNodeLabel + "=true",
	})
	if err != nil {
		return err
	}
	node.kubelet = ch
	return nil
}

// nodePortAddresses are where kube-proxy answers NodePorts: loopback, and each
// node's address on the bridge.
func (r *realNodes) nodePortAddresses() []string {
	addresses := []string{"127.0.0.1"}
	for _, n := range r.nodes {
		addresses = append(addresses, n.ip)
	}
	return addresses
}

func (r *realNodes) startProxy(kubeconfig string, healthzPort, metricsPort int) error {
	var cidrs []string
	for _, a := range r.nodePortAddresses() {
		if a == "127.0.0.1" {
			cidrs = append(cidrs, `"127.0.0.0/8"`)
		} else {
			cidrs = append(cidrs, fmt.Sprintf("%q", a+"/32"))
		}
	}
	config := filepath.Join(r.dir, "kube-proxy.yaml")
	// The first node's name: kube-proxy needs one to find a node IP. All
	// nodes share this network namespace, so one kube-proxy serves them all.
	if err := writeFile(config, []byte(fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %q
hostnameOverride: %s
bindAddress: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: [%s]
clusterCIDR: %s
# 0: leave the machine's conntrack settings as they are.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, r.nodes[0].name, r.nodes[0].ip, healthzPort, metricsPort, strings.Join(cidrs, ", "), realSubnet)), 0o644); err != nil {
		return err
	}
	ch, err := r.c.startSubcommand("kube-proxy", "kube-proxy", []string{"--config=" + config})
	if err != nil {
		return err
	}
	r.proxy = ch
	return nil
}

// realNodeReady: Ready, run by containerd, and carrying no taint but ours
// (node admission's not-ready taint goes once the node-lifecycle controller
// has seen it Ready).
func realNodeReady(ctx context.Context, client kubernetes.Interface, name string) error {
	n, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if !nodeReady(n) {
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return fmt.Errorf("%s not Ready: %s %s", name, c.Reason, c.Message)
			}
		}
		return fmt.Errorf("%s has no Ready condition yet", name)
	}
	if rt := n.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
		return fmt.Errorf("%s runs %q, not containerd", name, rt)
	}
	for _, t := range n.Spec.Taints {
		if t.Key != realNodeTaint && t.Key != pressureTaint {
			return fmt.Errorf("%s still tainted %s", name, t.Key)
		}
	}
	return nil
}

// stop undoes startRealNodes: kube-proxy and the kubelets first (so nothing
// restarts what goes next), then every pod sandbox through the CRI (which
// stops containers and releases their network), containerd and its shims,
// mounts, kube-proxy's chains, our rules, the bridge, the cgroups and the
// kernel tunables.
func (r *realNodes) stop() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lock == nil {
		return
	}
	if report := r.memoryReport(); report != "" {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: real nodes' resident memory at stop: %s\n", report)
	}
	var wg sync.WaitGroup
	stop := func(ch *child) {
		if ch != nil {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ch.stop(5 * time.Second)
			}()
		}
	}
	if r.apiForward != nil {
		_ = r.apiForward.Close()
	}
	stop(r.proxy)
	for _, node := range r.nodes {
		r.resumeKubelet(node)
		stop(node.kubelet)
	}
	wg.Wait()
	for _, node := range r.nodes {
		// A stopped containerd starts again (bounded), so that its sandboxes
		// are removed through it as the others' are.
		if node.containerdStopped {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			if err := r.restartContainerd(ctx, node); err != nil {
				fmt.Fprintf(os.Stderr, "jumppod-controlplane: %s: the stopped containerd did not start again: %v\n", node.name, err)
			}
			cancel()
		}
	}
	for _, node := range r.nodes {
		if node.containerd != nil && !node.containerd.exited() {
			wg.Add(1)
			go func() {
				defer wg.Done()
				removeSandboxes(node.socket)
				node.containerd.stop(5 * time.Second)
			}()
		}
	}
	wg.Wait()
	if r.registry != nil {
		r.registry.proc.stop(5 * time.Second)
	}
	r.removeLeftovers()
	_ = os.RemoveAll(stateBase)
	for _, rule := range r.iptables {
		_ = run("iptables", append([]string{"-w", "-D"}, rule...)...)
	}
	for t, v := range r.tunables {
		_ = os.WriteFile(filepath.Join("/proc/sys", t), []byte(v), 0o644)
	}
	_ = syscall.Flock(int(r.lock.Fd()), syscall.LOCK_UN)
	r.lock.Close()
	r.lock = nil
}

// removeSandboxes stops and removes every pod sandbox of one containerd:
// their containers die and CNI releases their addresses and veths.
func removeSandboxes(socket string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := criConn(socket)
	if err != nil {
		return
	}
	defer conn.Close()
	client := runtimeapi.NewRuntimeServiceClient(conn)
	list, err := client.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return
	}
	for _, sb := range list.Items {
		_, _ = client.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: sb.Id})
		_, _ = client.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: sb.Id})
	}
}

// removeLeftovers takes down what belongs to this DIR's real nodes and may
// outlive their processes: containerd's shims (their own process groups, by
// design), containers' and volumes' mounts, kube-proxy's chains, our
// FORWARD rules, the bridge, the nodes' cgroups and the container log links.
func (r *realNodes) removeLeftovers() {
	for _, pid := range shimsOf(stateBase) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	unmountUnder(stateBase)
	unmountUnder(r.dir)
	self, err := os.Executable()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = exec.CommandContext(ctx, self, "kube-proxy", "--cleanup").Run()
		cancel()
	}
	for _, rule := range [][]string{
		{"FORWARD", "-s", realSubnet, "!", "-o", realBridge, "-m", "comment", "--comment", iptablesComment, "-j", "DROP"},
		{"FORWARD", "-d", realSubnet, "!", "-i", realBridge, "-m", "comment", "--comment", iptablesComment, "-j", "DROP"},
	} {
		// Delete every copy: a crashed run may have left one per start.
		for i := 0; i < 10 && run("iptables", append([]string{"-w", "-D"}, rule...)...) == nil; i++ {
		}
	}
	r.iptables = nil
	removeKubeletChains()
	_ = run("ip", "link", "del", realBridge)
	// The kubelet's cgroup library makes the pods' cgroups in the unified
	// (v2) hierarchy too, mounted beside the v1 controllers here.
	for _, hierarchy := range append(v1Controllers(), "/sys/fs/cgroup/unified") {
		entries, _ := os.ReadDir(hierarchy)
		for _, e := range entries {
			if e.IsDir() && strings.HasPrefix(e.Name(), "jumppod-real-node-") {
				removeCgroupTree(filepath.Join(hierarchy, e.Name()))
			}
		}
	}
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if target, err := os.Readlink(l); err == nil && strings.HasPrefix(target, r.dir+"/") {
			_ = os.Remove(l)
		}
	}
}

// removeKubeletChains removes the chains the kubelet makes (its canaries, the
// localnet firewall, the hint), which kube-proxy --cleanup leaves: they are
// ours, as the lock says no other run uses them.
func removeKubeletChains() {
	for _, tool := range []string{"iptables", "ip6tables"} {
		for _, hook := range []string{"INPUT", "OUTPUT"} {
			for i := 0; i < 10 && run(tool, "-w", "-t", "filter", "-D", hook, "-j", "KUBE-FIREWALL") == nil; i++ {
			}
		}
		for _, chain := range [][2]string{
			{"filter", "KUBE-FIREWALL"}, {"filter", "KUBE-KUBELET-CANARY"}, {"nat", "KUBE-KUBELET-CANARY"},
			{"mangle", "KUBE-KUBELET-CANARY"}, {"mangle", "KUBE-IPTABLES-HINT"},
		} {
			if run(tool, "-w", "-t", chain[0], "-F", chain[1]) == nil {
				_ = run(tool, "-w", "-t", chain[0], "-X", chain[1])
			}
		}
	}
}

// shimsOf finds the containerd shims serving a containerd whose socket is
// under dir (their command line names it).
func shimsOf(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && strings.HasPrefix(args[i+1], dir+"/") {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// unmountUnder lazily unmounts every mount point below dir, deepest first.
func unmountUnder(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 {
			p := unescapeMountPath(fields[4])
			if strings.HasPrefix(p, dir+"/") {
				points = append(points, p)
			}
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func unescapeMountPath(p string) string {
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(p)
}

// removeCgroupTree removes a cgroup and its children, deepest first (a v1
// cgroup is removed with rmdir, once no process is left in it).
func removeCgroupTree(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// onBridge reports whether ip is in the bridge's range.
func onBridge(ip string) bool {
	_, subnet, _ := net.ParseCIDR(realSubnet)
	parsed := net.ParseIP(ip)
	return parsed != nil && subnet.Contains(parsed)
}

// The real nodes' users: each kubelet its own (in system:masters, since the
// apiserver runs no Node authorizer), and kube-proxy the user RBAC's
// bootstrap binds to system:node-proxier.
const kubeProxyUser = "system:kube-proxy"

func realNodeUser(node string) string { return "system:node:" + node }

func realNodeIdentities(n int) []identity {
	ids := []identity{newIdentity(kubeProxyUser)}
	for i := 1; i <= n; i++ {
		ids = append(ids, newIdentity(realNodeUser(realNodeName(i)), "system:nodes", mastersGroup))
	}
	return ids
}

// addIdentities adds users to the token file writeCredentials wrote, before
// the apiserver reads it.
func addIdentities(dir string, ids, extra []identity) ([]identity, error) {
	all := append(append([]identity{}, ids...), extra...)
	return all, writeFile(filepath.Join(dir, "tokens.csv"), tokenFile(all), 0o600)
}

// startProgram runs a program that is not this binary (containerd) as a
// component: its log in logs/, its process group stopped on exit, its death
// reported on c.died.
func (c *cluster) startProgram(logName, path string, args []string) (*child, error) {
	ch, err := startProgram(c.dir, logName, path, append(args, extraArgs(logName)...))
	if err != nil {
		return nil, err
	}
	c.watch(ch)
	return ch, nil
}

// startSubcommand runs one of this binary's subcommands under a log name of
// its own (kubelet-real-node-1), extra flags from the subcommand's variable.
func (c *cluster) startSubcommand(logName, sub string, args []string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ch, err := startProgram(c.dir, logName, self, append(append([]string{sub}, args...), extraArgs(sub)...))
	if err != nil {
		return nil, err
	}
	c.watch(ch)
	return ch, nil
}

// watch reports ch on c.died when it exits before the cluster is stopping: every
// component, control plane or real node, is watched the same way.
func (c *cluster) watch(ch *child) {
	go func() {
		<-ch.done
		select {
		case <-c.stopping:
		default:
			if !ch.expected.Load() {
				c.died <- ch.name
			}
		}
	}()
}

// controllersFor adds, for real nodes, the controllers a real kubelet and
// kube-proxy depend on: pods with a service-account token volume wait for
// the kube-root-ca.crt ConfigMap, and kube-proxy reads EndpointSlices; and
// the Deployments of jumppod's chart, installed on real nodes.
func controllersFor(opts upOptions) []string {
	if opts.realNodes == 0 {
		return controllers
	}
	return append(append([]string{}, controllers...), "root-ca-certificate-publisher-controller", "endpointslice-controller", "deployment-controller")
}
