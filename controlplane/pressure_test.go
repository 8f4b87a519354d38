package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// The pressure node's configuration is one the kubelet reads as meant: the
// soft threshold in bytes with its grace, and both taints; the other nodes'
// configuration has neither.
func TestThePressureNodesKubeletConfigurationHasItsSoftThresholdAndTaint(t *testing.T) {
	node := &realNode{name: "real-node-2", ip: "10.222.0.12", socket: "/run/c.sock", dir: "/tmp/n"}
	var config kubeletv1beta1.KubeletConfiguration
	text := kubeletConfig(node, 10250, 10248, time.Minute, &pressureInfo{Threshold: 19327352832})
	if err := yaml.UnmarshalStrict([]byte(text), &config); err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if got := config.EvictionSoft["memory.available"]; got != "19327352832" {
		t.Errorf("evictionSoft memory.available = %q", got)
	}
	if got := config.EvictionSoftGracePeriod["memory.available"]; got != "5s" {
		t.Errorf("evictionSoftGracePeriod memory.available = %q", got)
	}
	var taints []string
	for _, taint := range config.RegisterWithTaints {
		taints = append(taints, taint.Key+"="+taint.Value+":"+string(taint.Effect))
	}
	if want := realNodeTaint + "=true:NoSchedule," + pressureTaint + "=true:NoSchedule"; strings.Join(taints, ",") != want {
		t.Errorf("taints %v, want %s", taints, want)
	}

	var plain kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict([]byte(kubeletConfig(node, 10250, 10248, 10*time.Second, nil)), &plain); err != nil {
		t.Fatal(err)
	}
	if len(plain.EvictionSoft) != 0 || len(plain.RegisterWithTaints) != 1 {
		t.Errorf("a plain node: evictionSoft %v, taints %v", plain.EvictionSoft, plain.RegisterWithTaints)
	}
	// The disk is shared with the build: image garbage collection would delete the imported
	// pause image.
	if gc := plain.ImageGCHighThresholdPercent; gc == nil || *gc != 100 {
		t.Errorf("imageGCHighThresholdPercent %v, want 100 (no image garbage collection)", gc)
	}
	// --kubelet-sync-frequency, as the kubelet reads it.
	if got := plain.SyncFrequency.Duration; got != 10*time.Second {
		t.Errorf("syncFrequency %v, want 10s", got)
	}
}

// Memory.available as the kubelet computes it (cgroup v1, as the real nodes
// need) lies between nothing and the machine's memory.
func TestMemoryAvailableIsWithinTheMachinesMemory(t *testing.T) {
	available, err := memoryAvailable()
	if err != nil {
		t.Fatal(err)
	}
	meminfo, _ := os.ReadFile("/proc/meminfo")
	total := int64(0)
	for _, line := range strings.Split(string(meminfo), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kib, _ := strconv.ParseInt(f[1], 10, 64)
			total = kib * 1024
		}
	}
	if available <= 0 || available > total {
		t.Errorf("memory.available %d, MemTotal %d", available, total)
	}
}
