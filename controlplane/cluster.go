package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// upOptions are the flags shared by `up` and `run`.
type upOptions struct {
	dir          string
	nodes        int
	nodeCPU      string
	nodeMemory   string
	startTimeout time.Duration
	// realNodes > 0: that many nodes run by a real kubelet and containerd
	// (realnode.go), from the images in realNodeImages.
	realNodes      int
	realNodeImages string
	// extraImages: more OCI archives each real node imports.
	extraImages []string
	// pressureHeadroom > 0: the last real node evicts for memory once the
	// machine's available memory falls this far below what it was when the
	// node started (realnode.go pressureConfig).
	pressureHeadroom int64
	// registry: the real nodes pull from an OCI registry on loopback
	// (registry.go) instead of having the sshd image imported.
	registry bool
	// kubeletSync: the real kubelets' syncFrequency, which bounds how soon a
	// changed Secret reaches a running pod's volume.
	kubeletSync time.Duration
}

// cluster is a running control plane: embedded etcd, three child processes
// and the fake kubelet goroutines.
type cluster struct {
	dir        string
	server     string
	kubeconfig string
	auditLog   string

	etcd        *embed.Etcd
	children    []*child
	stopKubelet context.CancelFunc
	kubeletDone chan struct{}
	kubeletLog  *os.File
	real        *realNodes
	stopOnce    sync.Once
	stopping    chan struct{}
	// died receives the first component that exits while nobody stopped it.
	died chan string
}

// readyFile is DIR/ready.json: where everything is, for test harnesses.
type readyFile struct {
	Kubeconfig  string            `json:"kubeconfig"`
	Server      string            `json:"server"`
	AuditLog    string            `json:"audit_log"`
	Dir         string            `json:"dir"`
	WebhookCA   string            `json:"webhook_ca"`
	WebhookCert string            `json:"webhook_cert"`
	WebhookKey  string            `json:"webhook_key"`
	Users       map[string]string `json:"users"`
	Pid         int               `json:"pid"`
	RealNodes   *realNodesInfo    `json:"real_nodes,omitempty"`
}

// progress reports start-up steps on stderr; stdout carries only the ready line.
func progress(start time.Time, format string, args ...any) {
	fmt.Fprintf(os.Stderr, "jumppod-controlplane: [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

// startCluster brings the whole control plane up, or tears down what it had
// started and says which component failed and why. It never waits longer
// than opts.startTimeout, and returns early when ctx is cancelled.
func startCluster(ctx context.Context, opts upOptions) (*cluster, error) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(opts.startTimeout))
	defer cancel()

	dir, err := filepath.Abs(opts.dir)
	if err != nil {
		return nil, err
	}
	cpu, err := resource.ParseQuantity(opts.nodeCPU)
	if err != nil {
		return nil, fmt.Errorf("--node-cpu %q: %w", opts.nodeCPU, err)
	}
	memory, err := resource.ParseQuantity(opts.nodeMemory)
	if err != nil {
		return nil, fmt.Errorf("--node-memory %q: %w", opts.nodeMemory, err)
	}
	if opts.nodes < 1 || opts.nodes > 250 {
		return nil, fmt.Errorf("--nodes %d: must be between 1 and 250", opts.nodes)
	}
	// Files of an earlier run must not be mistaken for this one's.
	for _, stale := range []string{"ready.json", "audit.log", "logs", "users", "components"} {
		if err := os.RemoveAll(filepath.Join(dir, stale)); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}

	c := &cluster{
		dir:        dir,
		kubeconfig: filepath.Join(dir, "admin.kubeconfig"),
		auditLog:   filepath.Join(dir, "audit.log"),
		stopping:   make(chan struct{}),
		died:       make(chan string, 8),
	}
	ok := false
	defer func() {
		if !ok {
			c.stop()
		}
	}()

	pki, ids, err := writeCredentials(dir)
	if err != nil {
		return nil, fmt.Errorf("writing certificates and tokens: %w", err)
	}
	if opts.realNodes > 0 {
		if ids, err = addIdentities(dir, ids, realNodeIdentities(opts.realNodes)); err != nil {
			return nil, err
		}
	}

	etcd, etcdURL, err := startEtcd(dir, time.Until(start.Add(opts.startTimeout)))
	if err != nil {
		return nil, errors.New(describeFailure("etcd (embedded)", filepath.Join(dir, "logs", "etcd.log"), err.Error()))
	}
	c.etcd = etcd
	progress(start, "etcd ready at %s", etcdURL)

	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	apiPort, cmPort, schedPort := ports[0], ports[1], ports[2]
	c.server = fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	users := map[string]string{}
	for _, id := range ids {
		path := kubeconfigPath(dir, id)
		if err := writeKubeconfig(path, c.server, pki.ca.pem, id); err != nil {
			return nil, err
		}
		users[id.name] = path
	}

	// Without real nodes no pod runs, and the Endpoints of `kubernetes` could
	// only name loopback, which their validation refuses. With real nodes
	// pods reach the API server at the bridge's gateway (incluster.go).
	advertise := []string{"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"}
	if opts.realNodes > 0 {
		// Logs and exec reach a real kubelet at its InternalIP: the node
		// names are in no DNS.
		advertise = []string{"--advertise-address=" + realGateway, "--kubelet-preferred-address-types=InternalIP,Hostname"}
	}
	apiserver, err := c.startChild("kube-apiserver", append(advertise,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+pki.servingCert,
		"--tls-private-key-file="+pki.servingKey,
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pki.saPublic,
		"--service-account-signing-key-file="+pki.saPrivate,
		"--service-cluster-ip-range="+serviceRange,
		"--audit-policy-file="+filepath.Join(dir, "audit-policy.yaml"),
		"--audit-log-path="+c.auditLog,
		"--audit-log-format=json",
		"--audit-log-mode=blocking",
		"--allow-privileged=true",
		// A namespace's default node selector and tolerations (its
		// scheduler.alpha.kubernetes.io annotations), as operators pin a
		// namespace to a pool of nodes: how dstack's own jump pod, which
		// names no node, lands on the real nodes in the tests that drive
		// dstack's code.
		"--enable-admission-plugins=PodNodeSelector,PodTolerationRestriction",
		"--profiling=false",
	))
	if err != nil {
		return nil, err
	}
	admin, err := clientFor(c.kubeconfig)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, apiserver, func(ctx context.Context) error {
		_, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	}); err != nil {
		return nil, c.failure(apiserver.name, apiserver.logPath, err, opts.startTimeout)
	}
	progress(start, "kube-apiserver ready at %s", c.server)

	cm, err := c.startChild("kube-controller-manager", []string{
		"--kubeconfig=" + users[controllerUser],
		"--controllers=" + strings.Join(controllersFor(opts), ","),
		"--leader-elect=false",
		// Each controller acts as its own service account, as in kubeadm
		// clusters, so the audit log names the controller behind a request.
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + pki.saPrivate,
		"--root-ca-file=" + pki.caCert,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(cmPort),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--profiling=false",
	})
	if err != nil {
		return nil, err
	}
	sched, err := c.startChild("kube-scheduler", []string{
		"--kubeconfig=" + users[schedulerUser],
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(schedPort),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--profiling=false",
	})
	if err != nil {
		return nil, err
	}
	if err := c.startKubelet(users[fakeKubeletUser], nodeShape{count: opts.nodes, cpu: cpu, memory: memory}); err != nil {
		return nil, err
	}

	health := healthClient(pki.ca.cert)
	for _, w := range []struct {
		proc *child
		url  string
	}{{cm, fmt.Sprintf("https://127.0.0.1:%d/healthz", cmPort)}, {sched, fmt.Sprintf("https://127.0.0.1:%d/healthz", schedPort)}} {
		if err := waitFor(ctx, w.proc, func(ctx context.Context) error { return getOK(ctx, health, w.url) }); err != nil {
			return nil, c.failure(w.proc.name, w.proc.logPath, err, opts.startTimeout)
		}
		progress(start, "%s healthy", w.proc.name)
	}

	kubeletLog := filepath.Join(dir, "logs", "fake-kubelet.log")
	if err := waitFor(ctx, cm, func(ctx context.Context) error { return nodesSchedulable(ctx, admin, opts.nodes) }); err != nil {
		// Nodes lose their not-ready taint through the node-lifecycle controller.
		return nil, c.failure("fake kubelet / node-lifecycle controller", kubeletLog, err, opts.startTimeout)
	}
	progress(start, "%d nodes Ready and schedulable", opts.nodes)
	if err := waitFor(ctx, cm, func(ctx context.Context) error {
		_, err := admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err
	}); err != nil {
		return nil, c.failure("kube-controller-manager (serviceaccount controller)", cm.logPath, err, opts.startTimeout)
	}

	if opts.realNodes > 0 {
		if err := c.startRealNodes(ctx, start, opts, users, admin); err != nil {
			return nil, err
		}
	}

	ready := readyFile{
		Kubeconfig: c.kubeconfig, Server: c.server, AuditLog: c.auditLog, Dir: dir,
		WebhookCA:   filepath.Join(dir, "webhook", "ca.crt"),
		WebhookCert: filepath.Join(dir, "webhook", "tls.crt"),
		WebhookKey:  filepath.Join(dir, "webhook", "tls.key"),
		Users:       users, Pid: os.Getpid(),
	}
	if c.real != nil {
		ready.RealNodes = c.real.info()
	}
	data, err := json.MarshalIndent(ready, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(dir, "ready.json"), append(data, '\n'), 0o644); err != nil {
		return nil, err
	}
	progress(start, "ready: default service account exists")
	ok = true
	return c, nil
}

// controllers run by kube-controller-manager: what ReplicaSets, namespaces,
// service accounts, PDB-guarded evictions, pod GC and NotReady nodes need.
var controllers = []string{
	"replicaset-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
	"disruption-controller",
	"pod-garbage-collector-controller",
	"node-lifecycle-controller",
	"taint-eviction-controller",
}

// pkiFiles are the paths of the certificates and keys components read.
type pkiFiles struct {
	ca                      *authority
	caCert                  string
	servingCert, servingKey string
	saPrivate, saPublic     string
}

// writeCredentials writes the CA and serving pair of the components, the
// service-account keys, the webhook's CA and serving pair, the token file
// and the audit policy.
func writeCredentials(dir string) (*pkiFiles, []identity, error) {
	ca, err := newAuthority("jumppod-controlplane-ca")
	if err != nil {
		return nil, nil, err
	}
	// The `kubernetes` Service's address and names too, for pods on real
	// nodes: in-cluster config dials 10.96.0.1, the service range's first.
	serving, err := ca.issueServing("kube-apiserver", []net.IP{net.ParseIP("10.96.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"})
	if err != nil {
		return nil, nil, err
	}
	saPriv, saPub, err := serviceAccountKeys()
	if err != nil {
		return nil, nil, err
	}
	webhookCA, err := newAuthority("jumppod-webhook-ca")
	if err != nil {
		return nil, nil, err
	}
	webhook, err := webhookCA.issueServing("jumppod-webhook", nil, nil)
	if err != nil {
		return nil, nil, err
	}
	p := &pkiFiles{
		ca:          ca,
		caCert:      filepath.Join(dir, "pki", "ca.crt"),
		servingCert: filepath.Join(dir, "pki", "serving.crt"),
		servingKey:  filepath.Join(dir, "pki", "serving.key"),
		saPrivate:   filepath.Join(dir, "pki", "sa.key"),
		saPublic:    filepath.Join(dir, "pki", "sa.pub"),
	}
	ids := identities()
	files := []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{p.caCert, ca.pem, 0o644},
		{p.servingCert, serving.cert, 0o644},
		{p.servingKey, serving.key, 0o600},
		{p.saPrivate, saPriv, 0o600},
		{p.saPublic, saPub, 0o644},
		{filepath.Join(dir, "webhook", "ca.crt"), webhookCA.pem, 0o644},
		{filepath.Join(dir, "webhook", "tls.crt"), webhook.cert, 0o644},
		{filepath.Join(dir, "webhook", "tls.key"), webhook.key, 0o600},
		{filepath.Join(dir, "tokens.csv"), tokenFile(ids), 0o600},
		{filepath.Join(dir, "audit-policy.yaml"), []byte(auditPolicy), 0o644},
	}
	for _, f := range files {
		if err := writeFile(f.path, f.data, f.mode); err != nil {
			return nil, nil, err
		}
	}
	return p, ids, nil
}

// extraArgs are flags a person adds to one component for an experiment, e.g.
// JUMPPOD_CONTROLPLANE_KUBE_SCHEDULER_ARGS="--v=4" (later flags win in pflag).
func extraArgs(name string) []string {
	env := "JUMPPOD_CONTROLPLANE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")) + "_ARGS"
	return strings.Fields(os.Getenv(env))
}

func (c *cluster) startChild(name string, args []string) (*child, error) {
	ch, err := startChild(c.dir, name, append(args, extraArgs(name)...))
	if err != nil {
		return nil, err
	}
	c.children = append(c.children, ch)
	c.watch(ch)
	return ch, nil
}

func (c *cluster) startKubelet(kubeconfig string, shape nodeShape) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(c.dir, "logs", "fake-kubelet.log"))
	if err != nil {
		return err
	}
	c.kubeletLog = logFile
	ctx, cancel := context.WithCancel(context.Background())
	c.stopKubelet = cancel
	c.kubeletDone = make(chan struct{})
	k := newFakeKubelet(client, shape, log.New(logFile, "", log.LstdFlags|log.Lmicroseconds))
	go func() {
		defer close(c.kubeletDone)
		if err := k.run(ctx); err != nil && ctx.Err() == nil {
			k.log.Printf("fake kubelet stopped: %v", err)
			select {
			case <-c.stopping:
			default:
				c.died <- "fake kubelet"
			}
		}
	}()
	return nil
}

// failure describes a component that did not become ready in time.
func (c *cluster) failure(name, logPath string, err error, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errTimedOut) {
		return errors.New(describeFailure(name, logPath, fmt.Sprintf("not ready within --start-timeout %s", timeout)))
	}
	return errors.New(describeFailure(name, logPath, err.Error()))
}

var errTimedOut = errors.New("timed out")

// waitFor polls check every 250ms until it succeeds, the process exits, or
// ctx ends. The last check error is kept in the message: it says why.
func waitFor(ctx context.Context, proc *child, check func(context.Context) error) error {
	var last error
	for {
		callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(callCtx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-proc.done:
			return fmt.Errorf("exited (%v) before becoming ready", proc.exitErr)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w; last check: %v", errTimedOut, last)
			}
			return fmt.Errorf("interrupted while waiting: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// nodesSchedulable: every fake node Ready and free of the not-ready taint
// that node admission puts on new nodes and the node-lifecycle controller
// removes; until then the scheduler would place nothing.
func nodesSchedulable(ctx context.Context, client kubernetes.Interface, want int) error {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	good := 0
	var why []string
	for _, n := range nodes.Items {
		switch {
		case !nodeReady(&n):
			why = append(why, n.Name+" not Ready")
		case len(n.Spec.Taints) > 0:
			why = append(why, fmt.Sprintf("%s tainted %s", n.Name, n.Spec.Taints[0].Key))
		default:
			good++
		}
	}
	if good < want {
		return fmt.Errorf("%d of %d nodes Ready and untainted (%d registered) %s", good, want, len(nodes.Items), strings.Join(why, ", "))
	}
	return nil
}

func clientFor(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "jumppod-controlplane"
	cfg.QPS = 50
	cfg.Burst = 100
	return kubernetes.NewForConfig(cfg)
}

func healthClient(ca *x509.Certificate) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
}

func getOK(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// stop tears everything down in reverse order: fake kubelet, the
// scheduler and controller manager, the apiserver, then etcd. Each child's
// whole process group gets SIGTERM, then SIGKILL after a grace period.
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		close(c.stopping)
		c.real.stop()
		if c.stopKubelet != nil {
			c.stopKubelet()
			select {
			case <-c.kubeletDone:
			case <-time.After(5 * time.Second):
			}
			c.kubeletLog.Close()
		}
		var wg sync.WaitGroup
		for i := len(c.children) - 1; i >= 1; i-- {
			wg.Add(1)
			go func(ch *child) {
				defer wg.Done()
				ch.stop(5 * time.Second)
			}(c.children[i])
		}
		wg.Wait()
		if len(c.children) > 0 {
			c.children[0].stop(10 * time.Second)
		}
		if c.etcd != nil {
			c.etcd.Close()
		}
	})
}

// setNodeNotReady is `node-not-ready` and `node-ready`: it sets or removes
// the annotation the fake kubelet watches.
func setNodeNotReady(ctx context.Context, kubeconfig, node string, notReady bool) error {
	client, err := clientFor(kubeconfig)
	if err != nil {
		return err
	}
	value := "null"
	if notReady {
		value = `"true"`
	}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, notReadyAnnotation, value)
	_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}
