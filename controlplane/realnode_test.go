//go:build realnode

// The real nodes, end to end: `make real-node-check` runs this with the tag
// `realnode`, as root, after `make real-node-deps real-node-images`.

package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// sshdScript is jumppod's own start script, read from the Rust sources so the pod runs
// what `jumppod ensure` would put in it: plan/src/manifest.rs joins its start, the session
// count of the core (src/kit.rs, the kit's too) and its end.
func sshdScript(t *testing.T) string {
	t.Helper()
	return rustRawString(t, "plan/src/manifest.rs", "const SSHD_SCRIPT_START: &str = r#\"") +
		rustRawString(t, "src/kit.rs", "pub const SESSIONS: &str = r#\"") +
		rustRawString(t, "plan/src/manifest.rs", "const SSHD_SCRIPT_END: &str = r#\"")
}

// rustRawString is the raw string literal (r#"..."#) that follows open in the repository's
// file.
func rustRawString(t *testing.T, file, open string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(file)))
	if err != nil {
		t.Fatal(err)
	}
	start := bytes.Index(src, []byte(open))
	if start < 0 {
		t.Fatalf("no %q in %s", open, file)
	}
	rest := src[start+len(open):]
	end := bytes.Index(rest, []byte("\"#;"))
	if end < 0 {
		t.Fatalf("%q has no end in %s", open, file)
	}
	return string(rest[:end])
}

func newKey(t *testing.T) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return signer, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
}

func TestRealNodesRunTheJumpPodsSSHDBehindANodePort(t *testing.T) {
	images := os.Getenv("JUMPPOD_REAL_NODE_IMAGES")
	if images == "" {
		t.Fatal("JUMPPOD_REAL_NODE_IMAGES is not set: make real-node-check sets it after building the images")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.realNodes, opts.realNodeImages, opts.startTimeout = 2, images, 6*time.Minute
	began := time.Now()
	c, err := startCluster(ctx, opts)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Logf("control plane with 2 real nodes ready in %s", time.Since(began).Round(100*time.Millisecond))
	stopped := false
	defer func() {
		if !stopped {
			c.stop()
		}
	}()
	admin, err := clientFor(c.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("both real nodes are Ready on containerd, labelled and tainted", func(t *testing.T) {
		for i := 1; i <= 2; i++ {
			n, err := admin.CoreV1().Nodes().Get(ctx, realNodeName(i), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !nodeReady(n) {
				t.Errorf("%s not Ready", n.Name)
			}
			if rt := n.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://") {
				t.Errorf("%s runtime %q", n.Name, rt)
			}
			if n.Labels[realNodeLabel] != "true" {
				t.Errorf("%s labels %v", n.Name, n.Labels)
			}
			if len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != realNodeTaint || n.Spec.Taints[0].Effect != corev1.TaintEffectNoSchedule {
				t.Errorf("%s taints %v", n.Name, n.Spec.Taints)
			}
			addr := ""
			for _, a := range n.Status.Addresses {
				if a.Type == corev1.NodeInternalIP {
					addr = a.Address
				}
			}
			if addr != realNodeIP(i) {
				t.Errorf("%s InternalIP %q, want %s", n.Name, addr, realNodeIP(i))
			}
		}
	})

	t.Run("a pod that does not tolerate the taint is kept off the real nodes", func(t *testing.T) {
		ns := createNamespace(ctx, t, admin, "untolerated")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "wants-real"},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{realNodeLabel: "true"},
				Containers:   []corev1.Container{{Name: "c", Image: sshdImage, ImagePullPolicy: corev1.PullNever}},
			},
		}
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var message string
		poll(ctx, t, "the scheduler's Unschedulable condition", func() bool {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable {
					message = c.Message
					return true
				}
			}
			return false
		})
		if !strings.Contains(message, "2 node(s) had untolerated taint(s)") || !strings.Contains(message, "3 node(s) didn't match Pod's node affinity/selector") {
			t.Errorf("scheduler message = %q", message)
		}
	})

	t.Run("the jump pod's sshd runs from jumppod's start script and answers ssh through a NodePort on 127.0.0.1", func(t *testing.T) {
		ns := createNamespace(ctx, t, admin, "jump")
		signer, authorized := newKey(t)
		stranger, _ := newKey(t)
		pod := jumpPod(sshdScript(t), authorized)
		if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		created := time.Now()
		var running *corev1.Pod
		pollFor(ctx, t, 3*time.Minute, "the jump pod Running and Ready on a real node", func() (bool, string) {
			p, err := admin.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			running = p
			return p.Status.Phase == corev1.PodRunning && podConditionTrue(p, corev1.PodReady), podSummary(p)
		})
		t.Logf("pod Running and Ready %s after create, on %s, IP %s, QoS %s", time.Since(created).Round(100*time.Millisecond),
			running.Spec.NodeName, running.Status.PodIP, running.Status.QOSClass)
		if !strings.HasPrefix(running.Spec.NodeName, "real-node-") {
			t.Errorf("pod on %q, not a real node", running.Spec.NodeName)
		}
		if !onBridge(running.Status.PodIP) {
			t.Errorf("pod IP %q is not on %s (%s)", running.Status.PodIP, realBridge, realSubnet)
		}
		if running.Status.QOSClass != corev1.PodQOSGuaranteed {
			t.Errorf("QoS class %q", running.Status.QOSClass)
		}

		svc, err := admin.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "jump"},
			Spec: corev1.ServiceSpec{
				Type:     corev1.ServiceTypeNodePort,
				Selector: map[string]string{"app": "jump"},
				Ports:    []corev1.ServicePort{{Name: "ssh", Port: 22, TargetPort: intstr.FromInt32(22), Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodePort := svc.Spec.Ports[0].NodePort
		pollFor(ctx, t, time.Minute, "a ready endpoint of the Service in its EndpointSlices", func() (bool, string) {
			slices, err := admin.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=jump"})
			if err != nil {
				return false, err.Error()
			}
			for _, s := range slices.Items {
				for _, e := range s.Endpoints {
					if len(e.Addresses) > 0 && e.Addresses[0] == running.Status.PodIP && ptr.Deref(e.Conditions.Ready, false) {
						return true, ""
					}
				}
			}
			return false, fmt.Sprintf("%d slices", len(slices.Items))
		})

		addr := fmt.Sprintf("127.0.0.1:%d", nodePort)
		var output string
		pollFor(ctx, t, time.Minute, "an ssh session through "+addr, func() (bool, string) {
			out, err := sshRun(addr, signer, "id -u; cat /etc/hostname; cat /etc/debian_version; cat /proc/net/route")
			output = out
			if err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		lines := strings.Split(strings.TrimSpace(output), "\n")
		if len(lines) < 3 || lines[0] != "0" || lines[1] != pod.Name || !strings.HasPrefix(lines[2], "12.") {
			t.Fatalf("ssh output %q: want uid 0, hostname %s and Debian 12", output, pod.Name)
		}
		// The pod's routes, read inside it: the bridge's subnet and the
		// services, no default route (destinations are little-endian hex).
		var destinations []string
		for _, line := range lines[3:] {
			if f := strings.Fields(line); len(f) > 7 && f[0] != "Iface" {
				destinations = append(destinations, f[1]+"/"+f[7])
			}
		}
		if want := []string{"0000DE0A/0000FFFF", "0000600A/0000FFFF"}; strings.Join(sorted(destinations), " ") != strings.Join(sorted(want), " ") {
			t.Errorf("pod routes %v, want only %s and %s: %s", destinations, realSubnet, serviceRange, output)
		}
		if _, err := sshRun(addr, stranger, "true"); err == nil || !strings.Contains(err.Error(), "unable to authenticate") {
			t.Errorf("a key that is not authorized: err = %v, want the server to refuse it", err)
		}
	})

	// Everything the real nodes started or changed is gone after stop.
	stopping := time.Now()
	c.stop()
	stopped = true
	t.Logf("stopped in %s", time.Since(stopping).Round(100*time.Millisecond))
	if err := exec.Command("ip", "link", "show", realBridge).Run(); err == nil {
		t.Errorf("bridge %s still exists after stop", realBridge)
	}
	if pids := shimsOf(stateBase); len(pids) > 0 {
		t.Errorf("containerd shims still running after stop: %v", pids)
	}
	for _, h := range append(v1Controllers(), "/sys/fs/cgroup/unified") {
		for i := 1; i <= 2; i++ {
			if _, err := os.Stat(filepath.Join(h, cgroupRoot(realNodeName(i)))); err == nil {
				t.Errorf("cgroup %s%s left after stop", h, cgroupRoot(realNodeName(i)))
			}
		}
	}
	if out, _ := exec.Command("iptables", "-w", "-S", "FORWARD").CombinedOutput(); bytes.Contains(out, []byte(iptablesComment)) {
		t.Errorf("our FORWARD rules left after stop:\n%s", out)
	}
	for _, table := range []string{"filter", "nat", "mangle"} {
		if out, _ := exec.Command("iptables", "-w", "-t", table, "-S").CombinedOutput(); bytes.Contains(out, []byte("KUBE-")) {
			t.Errorf("kube-proxy's or the kubelet's chains left in table %s after stop:\n%s", table, out)
		}
	}
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

// jumpPod is the pod jumppod's ReplicaSet makes, on a real node: the start
// script from the authorized key, the readiness probe on port 22, requests
// equal to limits (Guaranteed), the keys Secret optional.
func jumpPod(script, authorized string) *corev1.Pod {
	quantity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "jump-0", Labels: map[string]string{"app": "jump"}},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{realNodeLabel: "true"},
			Tolerations: []corev1.Toleration{{
				Key: realNodeTaint, Operator: corev1.TolerationOpEqual, Value: "true", Effect: corev1.TaintEffectNoSchedule,
			}},
			Containers: []corev1.Container{{
				Name:            "sshd",
				Image:           sshdImage,
				ImagePullPolicy: corev1.PullNever,
				Command:         []string{"/bin/sh", "-c", script},
				Env:             []corev1.EnvVar{{Name: "DSTACK_AUTHORIZED_KEYS", Value: authorized}},
				Ports:           []corev1.ContainerPort{{Name: "ssh", ContainerPort: 22, Protocol: corev1.ProtocolTCP}},
				ReadinessProbe: &corev1.Probe{
					ProbeHandler:  corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(22)}},
					PeriodSeconds: 2,
				},
				Resources:    corev1.ResourceRequirements{Requests: quantity, Limits: quantity},
				VolumeMounts: []corev1.VolumeMount{{Name: "keys", MountPath: "/etc/ssh/jumppod/keys", ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{
				Name: "keys",
				VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
					SecretName: "jump-keys", Optional: ptr.To(true), DefaultMode: ptr.To[int32](0o444),
				}},
			}},
		},
	}
}

func podSummary(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "phase %s node %q ip %q", p.Status.Phase, p.Spec.NodeName, p.Status.PodIP)
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, "; %s=%s %s", c.Type, c.Status, c.Message)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			fmt.Fprintf(&b, "; %s waiting %s %s", cs.Name, w.Reason, w.Message)
		}
		if term := cs.State.Terminated; term != nil {
			fmt.Fprintf(&b, "; %s terminated %s exit %d", cs.Name, term.Reason, term.ExitCode)
		}
	}
	return b.String()
}

// sshRun opens one session as root with key, runs command and returns its
// output. The host key is not checked here: this test is about reaching
// sshd through the NodePort with the project's key.
func sshRun(addr string, key ssh.Signer, command string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	_ = conn.SetDeadline(time.Now().Add(15 * time.Second))
	sc, chans, reqs, err := ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
		User:            "root",
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         5 * time.Second,
	})
	if err != nil {
		conn.Close()
		return "", err
	}
	client := ssh.NewClient(sc, chans, reqs)
	defer client.Close()
	session, err := client.NewSession()
	if err != nil {
		return "", err
	}
	defer session.Close()
	out, err := session.CombinedOutput(command)
	var exit *ssh.ExitError
	if errors.As(err, &exit) {
		return string(out), fmt.Errorf("%q exited %d: %s", command, exit.ExitStatus(), out)
	}
	return string(out), err
}

// pollFor waits up to limit for cond, and fails naming what it waited for
// and the last state cond reported.
func pollFor(ctx context.Context, t *testing.T, limit time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, limit, true, func(context.Context) (bool, error) {
		ok, state := cond()
		last = state
		return ok, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v; last: %s", limit, what, err, last)
	}
}

// A real node whose kubelet cannot start is named with its log, and what was
// started for the real nodes is gone again.
func TestRealNodesAKubeletThatFailsIsNamedWithItsLog(t *testing.T) {
	images := os.Getenv("JUMPPOD_REAL_NODE_IMAGES")
	if images == "" {
		t.Fatal("JUMPPOD_REAL_NODE_IMAGES is not set: make real-node-check sets it after building the images")
	}
	t.Setenv("JUMPPOD_CONTROLPLANE_KUBELET_ARGS", "--no-such-flag=1")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	opts := testOptions(dir)
	opts.realNodes, opts.realNodeImages, opts.startTimeout = 2, images, 6*time.Minute
	c, err := startCluster(ctx, opts)
	if err == nil {
		c.stop()
		t.Fatal("start succeeded with a broken kubelet")
	}
	msg := err.Error()
	for _, want := range []string{"kubelet-real-node-1 (node real-node-1): exited", filepath.Join(dir, "logs", "kubelet-real-node-1.log"), "unknown flag: --no-such-flag"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
	if err := exec.Command("ip", "link", "show", realBridge).Run(); err == nil {
		t.Errorf("bridge %s still exists after the failed start", realBridge)
	}
	if pids := shimsOf(stateBase); len(pids) > 0 {
		t.Errorf("containerd shims still running after the failed start: %v", pids)
	}
}
