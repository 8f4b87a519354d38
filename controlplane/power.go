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
//
// A gentler fault on the same watch: kubeletPausedAnnotation stops the
// node's kubelet alone (SIGSTOP), as a kubelet starved or swapped out
// stalls, and its removal continues it (SIGCONT). Its containerd, its pods
// and kube-proxy run on; only the node's Lease and status go unrenewed.
//
// A third: containerdStoppedAnnotation stops the node's containerd alone, as
// its service manager would (SIGTERM), as a runtime upgrade or restart does.
// Its shims, in process groups of their own, keep its containers running;
// the kubelet, alive, reports the node Ready False once it finds the runtime
// down. Removed, containerd starts again from its state (as at a boot) and
// takes its shims back.

// kubeletPausedAnnotation on a real node, "true": its kubelet is paused.
const kubeletPausedAnnotation = "jumppod.test/kubelet-paused"

// containerdStoppedAnnotation on a real node, "true": its containerd is stopped.
const containerdStoppedAnnotation = "jumppod.test/containerd-stopped"

// containerdGrace is how long a stopped containerd has to exit after SIGTERM
// before SIGKILL, as a service manager's stop timeout.
const containerdGrace = 10 * time.Second

// keepPower follows the real nodes' annotations until the cluster stops.
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
			// After setPower: a node booted with the annotation still on pauses its new kubelet.
			r.setPaused(start, node.Name, node.Annotations[kubeletPausedAnnotation] == "true")
			r.setContainerdStopped(ctx, start, node.Name, node.Annotations[containerdStoppedAnnotation] == "true")
		}
		w.Stop()
	}
}

// setPower cuts or restores one node's power when it is not so already.
func (r *realNodes) setPower(ctx context.Context, admin kubernetes.Interface, start time.Time, name string, on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	node := r.named(name)
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

// named is the real node called name, or nil.
func (r *realNodes) named(name string) *realNode {
	for _, n := range r.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// setPaused stops or continues one node's kubelet when it is not so already.
// A node without power has no kubelet to pause.
func (r *realNodes) setPaused(start time.Time, name string, paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	node := r.named(name)
	if node == nil || node.off || node.kubelet == nil || node.paused == paused || r.lock == nil {
		return
	}
	if !paused {
		r.resumeKubelet(node)
		progress(start, "%s: kubelet continued (annotation %s removed) after %.1fs paused", name, kubeletPausedAnnotation, time.Since(node.pausedAt).Seconds())
		return
	}
	// The kubelet's process only, not its group: a helper it runs (iptables,
	// mount) finishes rather than stopping with a lock held.
	pid := node.kubelet.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		progress(start, "%s: kubelet (pid %d) not paused: %v", name, pid, err)
		return
	}
	node.paused, node.pausedAt = true, time.Now()
	progress(start, "%s: kubelet paused (annotation %s=true): SIGSTOP to pid %d; containerd, pods and kube-proxy run on", name, kubeletPausedAnnotation, pid)
}

// resumeKubelet continues a paused kubelet. Before a stop too: a stopped
// process keeps SIGTERM pending until it is continued, so child.stop would
// wait out its grace and kill it.
func (r *realNodes) resumeKubelet(node *realNode) {
	if !node.paused {
		return
	}
	_ = syscall.Kill(node.kubelet.cmd.Process.Pid, syscall.SIGCONT)
	node.paused = false
}

// setContainerdStopped stops or starts one node's containerd when it is not so
// already. A node without power has no containerd to stop.
func (r *realNodes) setContainerdStopped(ctx context.Context, start time.Time, name string, stopped bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	node := r.named(name)
	if node == nil || node.off || node.containerd == nil || node.containerdStopped == stopped || r.lock == nil {
		return
	}
	if stopped {
		progress(start, "%s: containerd stopped (annotation %s=true): %s", name, containerdStoppedAnnotation, stopContainerd(node))
		return
	}
	began := time.Now()
	if err := r.restartContainerd(ctx, node); err != nil {
		progress(start, "%s: containerd did not start again: %v", name, err)
		return
	}
	progress(start, "%s: containerd started again (annotation %s removed) after %.1fs stopped, answering in %.1fs",
		name, containerdStoppedAnnotation, time.Since(node.containerdStoppedAt).Seconds(), time.Since(began).Seconds())
}

// stopContainerd stops the node's containerd (SIGTERM to its process group,
// SIGKILL after containerdGrace) and waits for it to exit; its shims and their
// containers run on. It says how that went.
func stopContainerd(node *realNode) string {
	ch, began := node.containerd, time.Now()
	ch.expectExit()
	ch.stop(containerdGrace)
	node.containerdStopped, node.containerdStoppedAt = true, time.Now()
	return fmt.Sprintf("pid %d exited in %.1fs (%v); its %d shims and their pods run on, the kubelet too",
		ch.cmd.Process.Pid, time.Since(began).Seconds(), ch.exitErr, len(shimsOf(node.state)))
}

// restartContainerd starts a stopped containerd again from its state, as
// restorePower does, bounded by the start timeout. It counts as stopped still
// only if the new one is not running.
func (r *realNodes) restartContainerd(ctx context.Context, node *realNode) error {
	ctx, cancel := context.WithTimeout(ctx, r.startTimeout)
	defer cancel()
	// The stopped containerd's socket is still there (see restorePower).
	_ = os.Remove(node.socket)
	err := r.startContainerd(ctx, node)
	node.containerdStopped = node.containerd.exited()
	return err
}

// cutPower kills the node's processes at once and says what it killed.
func (r *realNodes) cutPower(node *realNode) string {
	node.off = true
	// SIGKILL takes a stopped process too, without a SIGCONT that would let
	// it run first. The kubelet the node boots with is paused again only if
	// the annotation is still there (keepPower); its containerd, which boots
	// too, is stopped again likewise.
	node.paused, node.containerdStopped = false, false
	for _, ch := range []*child{node.kubelet, node.containerd} {
		ch.expectExit()
		// A stopped containerd's group is gone: its number may be another's.
		if !ch.exited() {
			_ = syscall.Kill(-ch.cmd.Process.Pid, syscall.SIGKILL)
		}
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
