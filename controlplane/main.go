// jumppod-controlplane: a real Kubernetes control plane for jumppod's tests,
// built from Kubernetes' Go modules. One binary: the upstream kube-apiserver,
// kube-controller-manager and kube-scheduler commands as subcommands, and
// `up`/`run`, which start them as child processes next to an in-process
// etcd and a fake kubelet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
	_ "time/tzdata" // CronJob time zones, as upstream's mains import it

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // JSON log format, as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // client-go metrics, as upstream's mains
	_ "k8s.io/component-base/metrics/prometheus/version"  // version metric, as upstream's mains
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanager "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubeproxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

const usage = `usage: jumppod-controlplane COMMAND [FLAGS]

commands:
  up --dir DIR [--nodes 3] [--node-cpu 4] [--node-memory 8Gi] [--start-timeout 180s] [--exit-on-stdin-close]
     [--real-nodes 0] [--real-node-images DIR] [--real-node-image ARCHIVE]... [--pressure-headroom Q] [--kubelet-sync-frequency D]
     [--registry]
      start etcd, kube-apiserver, kube-controller-manager, kube-scheduler and fake nodes on
      127.0.0.1, and real nodes (kubelet + containerd, kube-proxy) when asked; print
      "ready <DIR/admin.kubeconfig>" once ready; stop on SIGINT/SIGTERM
  run --dir DIR [up flags] -- CMD ARGS...
      start as up does, run CMD with JUMPPOD_CLUSTER_DIR, JUMPPOD_CLUSTER_KUBECONFIG,
      JUMPPOD_REGISTRY (with --registry) and
      JUMPPOD_CLUSTER_AUDIT_LOG set, stop, and exit with CMD's exit code
  node-not-ready --dir DIR NODE   a fake NODE's kubelet stops (Ready=False, no heartbeats); a
                                  real NODE loses its power (its kubelet, containerd and pods
                                  are killed with SIGKILL; the API server is not told)
  node-ready --dir DIR NODE       ... and it comes back (a real node boots from its state)
  kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | kube-proxy [FLAGS]
      the upstream commands (what up starts, one process each)
  oci-archive --rootfs DIR --ref REF --out FILE [--entrypoint WORD]... [--env K=V]...
              [--label K=V]... [--user UID[:GID]] [--owner UID:GID] [--epoch SECONDS]
              [--gzip] [--digest-file FILE]
      pack a root filesystem into an OCI image archive, the same bytes for the same files
      (images/build.sh for the real nodes, image/build.sh for jumppod's own image)
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	name, args := os.Args[1], os.Args[2:]
	switch name {
	case "kube-apiserver":
		os.Exit(runUpstream(apiserver.NewAPIServerCommand(), args))
	case "kube-controller-manager":
		os.Exit(runUpstream(controllermanager.NewControllerManagerCommand(), args))
	case "kube-scheduler":
		os.Exit(runUpstream(scheduler.NewSchedulerCommand(), args))
	case "kubelet":
		// The kubelet's command needs a context: nil panics at start.
		os.Exit(runUpstream(kubelet.NewKubeletCommand(context.Background()), args))
	case "kube-proxy":
		os.Exit(runUpstream(kubeproxy.NewProxyCommand(), args))
	case "oci-archive":
		os.Exit(ociArchiveCommand(args))
	case "up":
		os.Exit(upCommand(args))
	case "run":
		os.Exit(runCommand(args))
	case "node-not-ready", "node-ready":
		os.Exit(nodeCommand(name == "node-not-ready", args))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
}

func runUpstream(cmd *cobra.Command, args []string) int {
	cmd.SetArgs(args)
	// A bad flag then ends the log with the error, not with pages of usage.
	cmd.SilenceUsage = true
	return cli.Run(cmd)
}

func upFlags(name string) (*flag.FlagSet, *upOptions) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o := &upOptions{}
	fs.StringVar(&o.dir, "dir", "", "directory for kubeconfigs, certificates, logs, audit log and etcd data (required)")
	fs.IntVar(&o.nodes, "nodes", 3, "number of fake nodes")
	fs.StringVar(&o.nodeCPU, "node-cpu", "4", "cpu capacity of each node")
	fs.StringVar(&o.nodeMemory, "node-memory", "8Gi", "memory capacity of each node")
	fs.DurationVar(&o.startTimeout, "start-timeout", 180*time.Second, "how long every component together may take to become ready")
	fs.IntVar(&o.realNodes, "real-nodes", 0, "number of real nodes (kubelet, containerd, one kube-proxy), tainted "+realNodeTaint+"=true:NoSchedule")
	fs.StringVar(&o.realNodeImages, "real-node-images", defaultImagesDir(), "directory of pause.oci.tar and sshd.oci.tar (images/build.sh)")
	fs.Var((*stringList)(&o.extraImages), "real-node-image", "another OCI archive every real node imports, e.g. jumppod's own (make image; repeatable)")
	fs.BoolVar(&o.registry, "registry", false, "with --real-nodes: run Debian's docker-registry on 127.0.0.1 (JUMPPOD_REGISTRY, ready.json's registry), push the sshd image there and have every real node's containerd pull from it over plain HTTP instead of importing it")
	fs.DurationVar(&o.kubeletSync, "kubelet-sync-frequency", time.Minute, "with --real-nodes: the kubelets' syncFrequency (the kubelet's default: 1m); a changed Secret reaches a running pod's volume within about this long")
	fs.Func("pressure-headroom", "a quantity (e.g. 2Gi): the last real node gets a soft memory eviction threshold this far below the memory available when it starts, and the taint "+pressureTaint+"=true:NoSchedule; for a test that presses it by allocating more than that", func(v string) error {
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return err
		}
		if q.Sign() <= 0 {
			return fmt.Errorf("%s: must be more than 0", v)
		}
		o.pressureHeadroom = q.Value()
		return nil
	})
	return fs, o
}

// defaultImagesDir: $JUMPPOD_REAL_NODE_IMAGES, else target/images beside
// target/controlplane where make puts this binary.
func defaultImagesDir() string {
	if dir := os.Getenv("JUMPPOD_REAL_NODE_IMAGES"); dir != "" {
		return dir
	}
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(filepath.Dir(self)), "images")
}

func upCommand(args []string) int {
	fs, opts := upFlags("up")
	exitOnStdinClose := fs.Bool("exit-on-stdin-close", false, "stop when stdin is closed (the parent process died)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if opts.dir == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "jumppod-controlplane up: --dir DIR is required and no arguments are taken")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *exitOnStdinClose {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	c, err := startCluster(ctx, *opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: start failed: %v\n", err)
		return 1
	}
	defer c.stop()
	fmt.Printf("ready %s\n", c.kubeconfig)
	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "jumppod-controlplane: stopping")
		return 0
	case name := <-c.died:
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: %s exited unexpectedly; see %s\n", name, filepath.Join(c.dir, "logs"))
		return 1
	}
}

func runCommand(args []string) int {
	fs, opts := upFlags("run")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	command := fs.Args()
	if opts.dir == "" || len(command) == 0 {
		fmt.Fprintln(os.Stderr, "jumppod-controlplane run: usage: run --dir DIR [up flags] -- CMD ARGS...")
		return 2
	}
	// SIGINT from a terminal reaches CMD too (same process group): let CMD
	// decide, then tear down. SIGTERM is passed on to CMD.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-signals:
			cancel()
		case <-ctx.Done():
		}
	}()
	c, err := startCluster(ctx, *opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: start failed: %v\n", err)
		return 1
	}
	defer c.stop()
	fmt.Fprintf(os.Stderr, "ready %s\n", c.kubeconfig)

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		"JUMPPOD_CLUSTER_DIR="+c.dir,
		"JUMPPOD_CLUSTER_KUBECONFIG="+c.kubeconfig,
		"JUMPPOD_CLUSTER_AUDIT_LOG="+c.auditLog,
	)
	if addr := c.registryAddr(); addr != "" {
		cmd.Env = append(cmd.Env, "JUMPPOD_REGISTRY="+addr)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: %v\n", err)
		return 127
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case err := <-waited:
			c.stop()
			var exit *exec.ExitError
			switch {
			case err == nil:
				return 0
			case errors.As(err, &exit):
				if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
					return 128 + int(status.Signal())
				}
				return exit.ExitCode()
			default:
				fmt.Fprintf(os.Stderr, "jumppod-controlplane: %v\n", err)
				return 1
			}
		case sig := <-signals:
			if sig == syscall.SIGTERM {
				_ = cmd.Process.Signal(sig)
			}
		case name := <-c.died:
			fmt.Fprintf(os.Stderr, "jumppod-controlplane: %s exited unexpectedly while %s runs; see %s\n",
				name, command[0], filepath.Join(c.dir, "logs"))
		}
	}
}

func nodeCommand(notReady bool, args []string) int {
	fs := flag.NewFlagSet("node-not-ready", flag.ContinueOnError)
	dir := fs.String("dir", "", "the directory given to up")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" || fs.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: jumppod-controlplane node-not-ready|node-ready --dir DIR NODE")
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := setNodeNotReady(ctx, filepath.Join(*dir, "admin.kubeconfig"), fs.Arg(0), notReady); err != nil {
		fmt.Fprintf(os.Stderr, "jumppod-controlplane: %v\n", err)
		return 1
	}
	return 0
}
