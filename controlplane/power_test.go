package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// processState is the state letter of /proc/PID/stat: T when stopped.
func processState(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	// After the command's name, in parentheses, which may hold spaces.
	text := string(data)
	return strings.Fields(text[strings.LastIndexByte(text, ')')+1:])[0]
}

// The annotation's pause stops the kubelet's process, once however many
// events repeat it; its removal continues it; a paused kubelet continued
// before its stop ends at SIGTERM, not at the grace period's SIGKILL. A
// `sleep` stands in for the kubelet: only its process is signalled.
func TestAPausedKubeletIsStoppedThenContinuedAndStopsAtOnce(t *testing.T) {
	ch, err := startProgram(t.TempDir(), "kubelet-real-node-1", "/bin/sleep", []string{"60"})
	if err != nil {
		t.Fatal(err)
	}
	defer ch.stop(time.Second)
	lock, err := os.CreateTemp(t.TempDir(), "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	node := &realNode{name: "real-node-1", kubelet: ch}
	r := &realNodes{lock: lock, nodes: []*realNode{node}}
	pid, start := ch.cmd.Process.Pid, time.Now()
	// Stopping is asynchronous: the state shows it once the kernel has.
	waitState := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for processState(t, pid) != want {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d in state %s, not %s", pid, processState(t, pid), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	r.setPaused(start, "real-node-1", true)
	r.setPaused(start, "real-node-1", true)
	waitState("T")
	r.setPaused(start, "real-node-1", false)
	waitState("S")
	if node.paused {
		t.Fatal("still marked paused once continued")
	}

	r.setPaused(start, "real-node-1", true)
	waitState("T")
	r.resumeKubelet(node)
	began := time.Now()
	ch.stop(10 * time.Second)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the continued kubelet took %v to stop: SIGTERM was not acted on", took)
	}
}

// The annotation's stop ends containerd's process (once however many events
// repeat it) and marks it expected; a power cut of the node after it neither
// signals the exited process's group nor waits on it. `sleep`s stand in for
// containerd and the kubelet; the node's name is no real node's, so the power
// cut finds no shim and no cgroup of its own.
func TestAStoppedContainerdIsGoneAndAPowerCutAfterItDoesNotWait(t *testing.T) {
	dir := t.TempDir()
	containerd, err := startProgram(dir, "containerd-stop-test", "/bin/sleep", []string{"60"})
	if err != nil {
		t.Fatal(err)
	}
	defer containerd.stop(time.Second)
	kubelet, err := startProgram(dir, "kubelet-stop-test", "/bin/sleep", []string{"60"})
	if err != nil {
		t.Fatal(err)
	}
	defer kubelet.stop(time.Second)
	lock, err := os.CreateTemp(dir, "lock")
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	node := &realNode{name: "stop-test-" + strconv.Itoa(os.Getpid()), state: dir, kubelet: kubelet, containerd: containerd}
	r := &realNodes{lock: lock, nodes: []*realNode{node}}
	start := time.Now()

	r.setContainerdStopped(t.Context(), start, node.name, true)
	r.setContainerdStopped(t.Context(), start, node.name, true)
	if !containerd.exited() || !node.containerdStopped || !containerd.expected.Load() {
		t.Fatalf("exited %v, marked stopped %v, its exit expected %v", containerd.exited(), node.containerdStopped, containerd.expected.Load())
	}
	if kubelet.exited() {
		t.Fatal("the kubelet stopped with containerd")
	}

	cut := make(chan string)
	go func() { cut <- r.cutPower(node) }()
	select {
	case what := <-cut:
		t.Log(what)
	case <-time.After(15 * time.Second):
		t.Fatal("the power cut of a node whose containerd was stopped did not return")
	}
	if !kubelet.exited() || node.containerdStopped {
		t.Fatalf("after the power cut: kubelet exited %v, containerd marked stopped %v", kubelet.exited(), node.containerdStopped)
	}
}
