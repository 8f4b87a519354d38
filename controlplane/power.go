package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// A real node loses its power when `node-not-ready` annotates it (the same
// command that stops a fake node's heartbeats), and boots again when
// `node-ready` removes the annotation. A power cut kills, with SIGKILL and
// no warning to anyone: the node's kubelet, its containerd, their shims and
// every process of its pods (found by the node's own cgroup root). Nothing
// tells the API server: the node-lifecycle controller finds the node lost
// when its heartbeats stop, as it would find a machine that lost power.
// kube-proxy is the machine's, shared by every node (one network
// namespace), so it keeps serving NodePorts through a power cut.

// keepPower follows the real nodes' annotation until the cluster stops.
func (r *realNodes) keepPower(admin kubernetes.Interface, start time.Time) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-r.c.stopping
		cancel()
	}()
	selector := metav1.ListOptions{LabelSelector: realNodeLabel + "=true"}
	for ctx.Err() == nil {
		w, err := admin.CoreV1().Nodes().Watch(ctx, selector)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for event := range w.ResultChan() {
			node, ok := event.Object.(*corev1.Node)
			if !ok || event.Type == watch.Deleted {
				continue
			}
			r.setPower(ctx, admin, start, node.Name, node.Annotations[notReadyAnnotation] != "true")
		}
		w.Stop()
	}
}

// setPower cuts or restores one node's power when it is not so already.
func (r *realNodes) setPower(ctx context.Context, admin kubernetes.Interface, start time.Time, name string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var node *realNode
	for _, n := range r.nodes {
		if n.name == name {
			node = n
		}
	}
	if node == nil || node.off == !on || r.lock == nil {
		return
	}
	if !on {
		progress(start, "%s: power cut (annotation %s=true): %s", name, notReadyAnnotation, r.cutPower(node))
		return
	}
	began := time.Now()
	if err := r.restorePower(ctx, admin, node); err != nil {
		progress(start, "%s: did not boot again: %v", name, err)
		return
	}
	progress(start, "%s: power back (annotation %s removed), Ready again in %.1fs", name, notReadyAnnotation, time.Since(began).Seconds())
}

// cutPower kills the node's processes at once and says what it killed.
func (r *realNodes) cutPower(node *realNode) string {
	node.off = true
	for _, ch := range []*child{node.kubelet, node.containerd} {
		ch.expectExit()
		_ = syscall.Kill(-ch.cmd.Process.Pid, syscall.SIGKILL)
		<-ch.done
	}
	shims := shimsOf(node.state)
	for _, pid := range shims {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	// A container's processes outlive their shim: they sit in the pods'
	// cgroups under the node's cgroup root, which nothing else uses.
	killed := map[int]bool{}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := processesUnder(filepath.Join("/sys/fs/cgroup/memory", cgroupRoot(node.name)))
		if len(pids) == 0 || time.Now().After(deadline) {
			left := ""
			if len(pids) > 0 {
				left = fmt.Sprintf("; %d still alive after 10s", len(pids))
			}
			return fmt.Sprintf("kubelet, containerd, %d shims and %d pod processes killed%s", len(shims), len(killed), left)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			killed[pid] = true
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// restorePower starts the node's containerd and kubelet again from their
// state, as a machine's boot would, and waits until the node is Ready with
// no taint left but the test's own (the node-lifecycle controller removes
// the unreachable taints once it sees the node Ready).
func (r *realNodes) restorePower(ctx context.Context, admin kubernetes.Interface, node *realNode) error {
	ctx, cancel := context.WithTimeout(ctx, r.startTimeout)
	defer cancel()
	// The killed containerd's socket is still there: the wait for the new one
	// would dial it (and gRPC log each refusal) until containerd replaced it.
	_ = os.Remove(node.socket)
	if err := r.startContainerd(ctx, node); err != nil {
		return err
	}
	before := socketAt(devicePluginSocket)
	if err := r.startKubelet(node); err != nil {
		return err
	}
	if err := waitFor(ctx, node.kubelet, func(context.Context) error { return socketReplaced(devicePluginSocket, before) }); err != nil {
		return r.c.failure(node.kubelet.name+" (node "+node.name+")", node.kubelet.logPath, err, r.startTimeout)
	}
	if err := waitFor(ctx, node.kubelet, func(ctx context.Context) error { return realNodeReady(ctx, admin, node.name) }); err != nil {
		return r.c.failure(node.kubelet.name+" (node "+node.name+")", node.kubelet.logPath, err, r.startTimeout)
	}
	node.off = false
	return nil
}

// processesUnder lists the processes of a cgroup v1 hierarchy's subtree.
func processesUnder(root string) []int {
	var pids []int
	_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// memoryReport is the resident memory of the real nodes' components, now and
// at their peak (VmRSS, VmHWM), for the log when the cluster stops.
func (r *realNodes) memoryReport() string {
	var parts []string
	add := func(ch *child) {
		if ch == nil || ch.exited() {
			return
		}
		rss, hwm := residentMemory(ch.cmd.Process.Pid)
		parts = append(parts, fmt.Sprintf("%s %d MiB (peak %d MiB)", ch.name, rss>>20, hwm>>20))
	}
	for _, node := range r.nodes {
		add(node.kubelet)
		add(node.containerd)
	}
	add(r.proxy)
	return strings.Join(parts, ", ")
}

// residentMemory reads a process's VmRSS and VmHWM in bytes.
func residentMemory(pid int) (rss, hwm int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		kib, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "VmRSS:":
			rss = kib << 10
		case "VmHWM:":
			hwm = kib << 10
		}
	}
	return rss, hwm
}
